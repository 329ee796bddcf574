/** The archive that carries an agent container's token in is a valid tar that GNU tar extracts. */
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { tokenArchive } from '../../../../src/scaler/backends/container/token-handoff.js';

describe('tokenArchive', () => {
  it('extracts to .kici-handoff/agent-token holding the token, in a dir any user may clear', async () => {
    await fc.assert(
      fc.asyncProperty(fc.stringMatching(/^[A-Za-z0-9_.-]{1,700}$/), async (token) => {
        const dir = await mkdtemp(join(tmpdir(), 'kici-handoff-'));
        try {
          await writeFile(join(dir, 'a.tar'), tokenArchive(token));
          execFileSync('tar', [
            '-xf',
            join(dir, 'a.tar'),
            '-C',
            dir,
            '--no-same-permissions',
            '--no-same-owner',
          ]);
          expect(await readFile(join(dir, '.kici-handoff/agent-token'), 'utf8')).toBe(`${token}\n`);
          const listing = execFileSync('tar', ['-tvf', join(dir, 'a.tar')], { encoding: 'utf8' });
          expect(listing).toMatch(/^drwxrwxrwx .* \.kici-handoff\/$/m);
          expect(listing).toMatch(/^-rw-r--r-- .* \.kici-handoff\/agent-token$/m);
          expect((await stat(join(dir, '.kici-handoff'))).isDirectory()).toBe(true);
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      }),
      { numRuns: 20 },
    );
  });
});
