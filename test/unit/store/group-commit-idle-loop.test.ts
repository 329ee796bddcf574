/**
 * A result someone waits on (`finish(..., soon)`) goes out in the next turn of the event loop even
 * when nothing else is happening in the process. An unreferenced setImmediate does not guarantee
 * that: with only a far-off timer left, the loop sleeps in its poll phase and the write (and so
 * the agent's ack and its next job) waits for that timer. Run in a child process, whose event loop
 * is as idle as an orchestrator's between two agent messages; vitest's own would wake it up.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));
const repoNode = join(resolve(here, '../../..'), 'node_modules', '.bin', 'node');
const NODE = existsSync(repoNode) ? repoNode : process.execPath;
const HOOK = pathToFileURL(join(here, '../scaler/fixtures/ts-resolve-hook.mjs')).href;

describe('GroupCommit on an idle event loop', () => {
  it('100 waited-on results, one after another, are all stored within seconds', () => {
    const child = spawnSync(
      NODE,
      [
        '--import',
        HOOK,
        '--experimental-transform-types',
        '--no-warnings',
        join(here, 'fixtures', 'soon-result-child.ts'),
        '100',
      ],
      { encoding: 'utf8', timeout: 60_000 },
    );
    expect(child.stderr).toBe('');
    expect(child.status).toBe(0);
    // Each result costs a few ms; a flush left waiting for the 120 s timer never gets here.
    expect(Number(child.stdout.trim())).toBeLessThan(10_000);
  }, 90_000);
});
