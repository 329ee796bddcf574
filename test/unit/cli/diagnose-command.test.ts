import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildAdminProgram } from '../../../src/cli/admin/program.js';
import { backoffKey, ProvisionBackoff } from '../../../src/scaler/core/backoff.js';
import { executableProblem } from '../../../src/scaler/preflight.js';
import { tempDir } from '../../helpers/temp-dirs.js';

describe('kici-admin diagnose', () => {
  it('is the command the backoff message tells operators to run', () => {
    const b = new ProvisionBackoff();
    const key = backoffKey('bm', 'linux');
    for (let i = 0; i < 5; i++)
      b.recordFailure(key, 0, `scaler-bare-metal-0000000${i}`, { kind: 'binary-missing', message: 'x' });
    const held = b.check(key, 1);
    expect(held.blocked).toBe(true);
    const reason = held.blocked ? held.reason : '';
    const cmd = /`kici-admin ([^`]+)`/.exec(reason)?.[1]?.split(' ');
    expect(cmd).toEqual(['diagnose']);
    const program = buildAdminProgram();
    expect(program.commands.map((c) => c.name())).toContain(cmd![0]);
    // The report is headed by the row the message names.
    expect(reason).toContain('scaler:bm row');
  });

  it('tells a missing binary, a non-executable file and a directory apart', async () => {
    const dir = await tempDir('kici-tools-');
    const file = join(dir, 'agent');
    await writeFile(file, '#!/bin/sh\n');
    await chmod(file, 0o644);
    await mkdir(join(dir, 'sub'));
    expect(await executableProblem(join(dir, 'nope'))).toMatch(/does not exist$/);
    expect(await executableProblem(file)).toMatch(/is not an executable file$/);
    expect(await executableProblem(join(dir, 'sub'))).toMatch(/is a directory, not an executable file$/);
    await chmod(file, 0o755);
    expect(await executableProblem(file)).toBeUndefined();
  });
});
