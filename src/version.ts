import { readFileSync } from 'node:fs';

/**
 * This package's version, read from its package.json at run time. The file sits one level above
 * both src/ and dist/, so the same relative path works from the sources and from an installed
 * tarball. Only node:fs is imported: kici-agent loads this and must start fast.
 */
export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    version?: unknown;
  };
  if (typeof pkg.version !== 'string') throw new Error('package.json has no version');
  return pkg.version;
}
