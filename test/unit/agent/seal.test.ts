import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SEAL_MARKER, sealAgent, type SealDeps } from '../../../src/agent/seal.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
const temp = () => {
  const d = mkdtempSync(join(tmpdir(), 'kici-seal-unit-'));
  dirs.push(d);
  return d;
};

function deps(
  over: Partial<SealDeps> = {},
): SealDeps & { calls: { file: string; env: NodeJS.ProcessEnv }[] } {
  const calls: { file: string; env: NodeJS.ProcessEnv }[] = [];
  return {
    platform: 'linux',
    uid: 1000,
    readsAnything: false,
    execPath: process.execPath,
    execArgv: [],
    argv: ['node', '/opt/agent.js'],
    env: {},
    execve: (file, _args, env) => {
      calls.push({ file, env });
      throw new Error('execve refused here');
    },
    calls,
    ...over,
  };
}

describe.runIf(process.platform === 'linux')('agent self-seal decisions', () => {
  it('is skipped when switched off, off Linux, or when the process may read any file', () => {
    expect(sealAgent('t', deps({ env: { KICI_AGENT_SEAL: 'off' } }))).toEqual({
      kind: 'skipped',
      why: 'KICI_AGENT_SEAL=off',
    });
    expect(sealAgent('t', deps({ platform: 'darwin' })).kind).toBe('skipped');
    expect(sealAgent('t', deps({ readsAnything: true })).kind).toBe('skipped');
  });

  it('a failed re-execution leaves no copy behind and says why; the token went to the new image only', () => {
    const base = temp();
    const d = deps({ env: { XDG_RUNTIME_DIR: base, KICI_AGENT_TOKEN_FD: '3' } });
    expect(sealAgent('kici_secret', d)).toEqual({ kind: 'unsealed', why: 'execve refused here' });
    expect(d.calls).toHaveLength(1);
    expect(d.calls[0]!.file).toMatch(new RegExp(`^${base}/\\.kici-seal-[^/]+/node$`));
    expect(d.calls[0]!.env).toMatchObject({
      KICI_AGENT_TOKEN: 'kici_secret',
      [SEAL_MARKER]: d.calls[0]!.file,
    });
    expect(d.calls[0]!.env.KICI_AGENT_TOKEN_FD).toBeUndefined();
    expect(readdirSync(base)).toEqual([]);
    // Nothing of the token stays in this process's own environment.
    expect(d.env.KICI_AGENT_TOKEN).toBeUndefined();
  });

  it('no process.execve: unsealed, with the reason', () => {
    expect(sealAgent(undefined, deps({ execve: undefined }))).toEqual({
      kind: 'unsealed',
      why: 'this Node has no process.execve',
    });
  });

  it('the re-executed agent removes only a copy it made, never a path a label set could name', () => {
    const base = temp();
    const mine = join(base, '.kici-seal-abc');
    mkdirSync(mine);
    writeFileSync(join(mine, 'node'), '');
    sealAgent(undefined, deps({ env: { [SEAL_MARKER]: join(mine, 'node') } }));
    expect(existsSync(mine)).toBe(false);
    const other = join(base, 'precious');
    mkdirSync(other);
    writeFileSync(join(other, 'node'), '');
    const d = deps({ env: { [SEAL_MARKER]: join(other, 'node') } });
    sealAgent(undefined, d);
    expect(existsSync(join(other, 'node'))).toBe(true);
    expect(d.env[SEAL_MARKER]).toBeUndefined();
  });
});
