import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          testTimeout: 30_000,
          globalSetup: ['test/helpers/global-setup.ts'],
        },
      },
      {
        test: {
          name: 'e2e',
          globalSetup: ['test/helpers/global-setup.ts'],
          include: ['test/e2e/**/*.test.ts'],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          fileParallelism: false,
        },
      },
      {
        test: {
          name: 'system',
          globalSetup: ['test/helpers/global-setup.ts'],
          include: ['test/system/**/*.test.ts'],
          exclude: ['test/system/engine/**'],
          testTimeout: 300_000,
          hookTimeout: 300_000,
          fileParallelism: false,
        },
      },
      {
        // Run once per engine by scripts/system-test.sh, with KICI_TEST_ENGINE and DOCKER_HOST set.
        test: {
          name: 'system-engine',
          globalSetup: ['test/helpers/global-setup.ts'],
          setupFiles: ['test/helpers/engine-setup.ts'],
          include: ['test/system/engine/**/*.test.ts'],
          testTimeout: 300_000,
          hookTimeout: 300_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
