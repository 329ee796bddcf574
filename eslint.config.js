// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  // test/types is checked by its own tsc run against the built package (npm run test:types).
  { ignores: ['dist/**', 'node_modules/**', '.kici-data/**', 'coverage/**', 'test/types/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        Buffer: 'readonly',
        URL: 'readonly',
        AbortController: 'readonly',
        AbortSignal: 'readonly',
        fetch: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      'no-console': 'off',
    },
  },
  {
    // The dashboard's page scripts run in the browser (no build step, no bundler).
    files: ['ui/**/*.js'],
    languageOptions: {
      globals: Object.fromEntries(
        [
          'window',
          'document',
          'location',
          'addEventListener',
          'removeEventListener',
          'EventSource',
          'URLSearchParams',
          'FormData',
          'fetch',
          'setTimeout',
          'clearTimeout',
          'setInterval',
          'clearInterval',
          'console',
        ].map((name) => [name, 'readonly']),
      ),
    },
  },
  {
    // Type-aware rules: a promise nobody awaits turns a failed write into an unhandled rejection that
    // ends the process, and a non-exhaustive switch over a union hides a new member.
    files: ['**/*.ts'],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/switch-exhaustiveness-check': [
        'error',
        { considerDefaultExhaustiveForUnions: true },
      ],
    },
  },
  {
    // The port is the seam: outside src/scaler/backends/, nothing names a concrete backend (its
    // class, or anything else in its folder). Only the registry and the backend's own folder may.
    files: ['src/**/*.ts'],
    ignores: ['src/scaler/backends/**'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '(^|/)backends/[^/]+/',
              message:
                'import backends through src/scaler/backends/registry.ts; only the registry and the backend folder itself know a concrete backend',
            },
          ],
        },
      ],
    },
  },
  {
    // A backend folder does not reach into another backend's folder.
    files: ['src/scaler/backends/*/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^\\.\\./(?!\\.\\.)[^/]+/',
              message: "a backend folder must not import another backend's files",
            },
          ],
        },
      ],
    },
  },
);
