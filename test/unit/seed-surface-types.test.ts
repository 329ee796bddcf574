import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));
const tsc = fileURLToPath(new URL('../../node_modules/typescript/bin/tsc', import.meta.url));

/**
 * test/types/seed-surface.ts uses every name the seed declares the way it declares it, through the
 * package's own exports (the built dist, so `npm test` builds first). The compiler's verdict is the
 * test: a public call shape that drifts fails here with the line that no longer type-checks.
 */
describe('the seed-declared public surface', () => {
  it('type-checks every declared call shape through the package exports', async () => {
    const run = await promisify(execFile)(process.execPath, [tsc, '-p', 'tsconfig.seed.json'], {
      cwd: root,
    }).then(
      (r) => ({ code: 0, out: r.stdout + r.stderr }),
      (err: { code?: number; stdout?: string; stderr?: string }) => ({
        code: err.code ?? 1,
        out: `${err.stdout ?? ''}${err.stderr ?? ''}`,
      }),
    );
    expect(run.out, 'tsc -p tsconfig.seed.json').toBe('');
    expect(run.code).toBe(0);
  }, 120_000);
});
