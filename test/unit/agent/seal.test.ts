import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import fc from 'fast-check';
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
): SealDeps & { calls: { file: string; env: NodeJS.ProcessEnv; token?: string; mode?: number }[] } {
  const calls: { file: string; env: NodeJS.ProcessEnv; token?: string; mode?: number }[] = [];
  return {
    platform: 'linux',
    uid: 1000,
    readsAnything: false,
    execPath: process.execPath,
    execArgv: [],
    argv: ['node', '/opt/agent.js'],
    env: {},
    execve: (file, _args, env) => {
      const tf = env.KICI_AGENT_TOKEN_FILE;
      calls.push({
        file,
        env,
        ...(tf && { token: readFileSync(tf, 'utf8'), mode: statSync(tf).mode & 0o777 }),
      });
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

  it('a failed re-execution leaves nothing behind and says why; the token went in a 0600 file, not the environment', () => {
    const base = temp();
    const d = deps({ env: { XDG_RUNTIME_DIR: base, KICI_AGENT_TOKEN_FD: '3' } });
    expect(sealAgent('kici_secret', d)).toEqual({ kind: 'unsealed', why: 'execve refused here' });
    expect(d.calls).toHaveLength(1);
    const call = d.calls[0]!;
    expect(call.file).toMatch(new RegExp(`^${base}/\\.kici-seal-[^/]+/node$`));
    expect(call.env).toMatchObject({
      KICI_AGENT_TOKEN_FILE: join(dirname(call.file), 'token'),
      [SEAL_MARKER]: dirname(call.file),
    });
    expect(call.token).toBe('kici_secret');
    expect(call.mode).toBe(0o600);
    // If the new image were not sealed after all, its environment would stay readable: never there.
    expect(Object.values(call.env).join('\n')).not.toContain('kici_secret');
    expect(call.env.KICI_AGENT_TOKEN).toBeUndefined();
    expect(call.env.KICI_AGENT_TOKEN_FD).toBeUndefined();
    expect(readdirSync(base)).toEqual([]);
    // Nothing of the token stays in this process's own environment.
    expect(d.env.KICI_AGENT_TOKEN).toBeUndefined();
  });

  it('an agent that may change its gid seals by switching it away and back, without re-executing', () => {
    const egid: number[] = [0];
    const d = deps({
      uid: 0,
      readsAnything: true,
      getegid: () => egid.at(-1)!,
      setegid: (g) => void egid.push(g),
      // The kernel gives a sealed process's /proc entries to gid 0, whatever its egid.
      procGid: () => 0,
    });
    expect(sealAgent('t', d)).toEqual({ kind: 'sealed' });
    expect(egid).toEqual([0, 65534, 0]);
    expect(d.calls).toEqual([]);
  });

  it('a gid switch that leaves the process dumpable is reported, and the gid is restored', () => {
    const egid: number[] = [0];
    const d = deps({
      uid: 0,
      getegid: () => egid.at(-1)!,
      setegid: (g) => void egid.push(g),
      procGid: () => egid.at(-1)!,
    });
    expect(sealAgent('t', d)).toEqual({
      kind: 'unsealed',
      why: 'fs.suid_dumpable is 1, so a change of ids does not seal',
    });
    expect(egid.at(-1)).toBe(0);
  });

  it('whatever the switch meets, the agent ends with the gid it had; no switch allowed means the exec path', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(0, 1, 1000, 65534),
        fc.array(fc.boolean(), { minLength: 2, maxLength: 2 }),
        fc.option(fc.constantFrom(0, 1, 65534), { nil: undefined }),
        (own, allowed, owner) => {
          let egid: number = own;
          let tries = 0;
          const d = deps({
            readsAnything: true,
            getegid: () => egid,
            setegid: (g) => {
              if (g !== own && !allowed[tries++]) throw new Error('EPERM');
              egid = g;
            },
            procGid: () => {
              if (owner === undefined) throw new Error('ENOENT');
              return owner;
            },
          });
          const out = sealAgent('t', d);
          expect(egid).toBe(own);
          // Each gid other than the agent's own is tried in turn until one switch is allowed.
          const tried = [65534, 1].filter((g) => g !== own).length;
          if (!allowed.slice(0, tried).some(Boolean))
            expect(out).toEqual({ kind: 'skipped', why: 'may read any file (CAP_DAC_OVERRIDE)' });
          else expect(out.kind).not.toBe('skipped');
        },
      ),
    );
  });

  it('no process.execve: unsealed, with the reason', () => {
    expect(sealAgent(undefined, deps({ execve: undefined }))).toEqual({
      kind: 'unsealed',
      why: 'this Node has no process.execve',
    });
  });

  it('the re-executed agent removes only a private dir it made, never a path a label set could name', () => {
    const base = temp();
    const mine = join(base, '.kici-seal-abc');
    mkdirSync(mine);
    writeFileSync(join(mine, 'node'), '');
    sealAgent(undefined, deps({ env: { [SEAL_MARKER]: mine } }));
    expect(existsSync(mine)).toBe(false);
    const other = join(base, 'precious');
    mkdirSync(other);
    writeFileSync(join(other, 'node'), '');
    const d = deps({ env: { [SEAL_MARKER]: other } });
    sealAgent(undefined, d);
    expect(existsSync(join(other, 'node'))).toBe(true);
    expect(d.env[SEAL_MARKER]).toBeUndefined();
    // A dir of ours that holds anything else is left alone too.
    const full = join(base, '.kici-seal-def');
    mkdirSync(full);
    writeFileSync(join(full, 'keep'), '');
    sealAgent(undefined, deps({ env: { [SEAL_MARKER]: full } }));
    expect(existsSync(join(full, 'keep'))).toBe(true);
  });
});
