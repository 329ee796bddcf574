import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { DeadManSwitch } from '../../../src/agent/dead-man.js';
import { JobRunner } from '../../../src/agent/job-runner.js';
import { LauncherSlot, handOver, spawnLauncher } from '../../../src/agent/step-launcher.js';
import { runStep, type StepOutcome } from '../../../src/agent/step-runner.js';
import type { AgentMessage } from '../../../src/protocol/messages.js';

const dir = mkdtempSync(join(tmpdir(), 'kici-launcher-test-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Run `script` as a step, through a fresh launcher or spawned directly; its output lines and outcome. */
async function step(
  script: string,
  opts: { env?: NodeJS.ProcessEnv; launcher?: boolean; timeoutMs?: number; cancelAfterLine?: boolean } = {},
): Promise<{
  out: string[];
  err: string[];
  outcome: StepOutcome;
  pgid: number | undefined;
  launcherPid?: number;
}> {
  const launcher = opts.launcher === false ? undefined : spawnLauncher();
  if (opts.launcher !== false) expect(launcher).toBeDefined();
  const out: string[] = [];
  const err: string[] = [];
  const s = runStep({
    script,
    cwd: dir,
    env: opts.env ?? { PATH: process.env.PATH },
    timeoutMs: opts.timeoutMs,
    drainMs: 50,
    launcher,
    onLine: (stream, line) => {
      (stream === 'stdout' ? out : err).push(line);
      if (opts.cancelAfterLine && out.length === 1) s.cancel('cancel');
    },
  });
  const outcome = await s.done;
  await s.release();
  return { out, err, outcome, pgid: s.pgid, ...(launcher ? { launcherPid: launcher.child.pid } : {}) };
}

const alive = (pid: number) => existsSync(`/proc/${pid}`) && !/^State:\s+Z/m.test(statusOf(pid));
function statusOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return 'State: Z';
  }
}

/** The environment the step's shell was started with, exactly (NUL-separated, as base64). */
const ENV_OF_SHELL = 'base64 -w0 /proc/$$/environ; echo';
const decodeEnv = (b64: string) =>
  Buffer.from(b64, 'base64').toString('utf8').split('\0').filter(Boolean).sort();

describe('a step through a launcher behaves as a step spawned directly', () => {
  it('gets exactly the given environment, with any value the shell could mangle', async () => {
    const env = {
      PATH: process.env.PATH,
      QUOTES: `it's "quoted" \\ and $HOME and \`date\``,
      LINES: 'one\ntwo\n',
      EMPTY: '',
      SPACES: '  a  b  ',
      PWD: '/somewhere/else',
      OLDPWD: '/old',
    };
    const viaLauncher = await step(ENV_OF_SHELL, { env });
    const direct = await step(ENV_OF_SHELL, { env, launcher: false });
    expect(viaLauncher.outcome.exitCode).toBe(0);
    expect(decodeEnv(viaLauncher.out[0]!)).toEqual(decodeEnv(direct.out[0]!));
    expect(decodeEnv(viaLauncher.out[0]!)).toEqual(
      Object.entries(env)
        .map(([k, v]) => `${k}=${v}`)
        .sort(),
    );
  });

  it('property: any exportable environment arrives unchanged, nothing added', async () => {
    const name = fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,12}$/).filter((k) => k !== 'PATH');
    const value = fc.string({ maxLength: 40 }).filter((v) => !v.includes('\0'));
    await fc.assert(
      fc.asyncProperty(fc.dictionary(name, value, { maxKeys: 8 }), async (vars) => {
        const env = { PATH: process.env.PATH, ...vars };
        const { out, outcome } = await step(ENV_OF_SHELL, { env });
        expect(outcome.exitCode).toBe(0);
        expect(decodeEnv(out[0] ?? '')).toEqual(
          Object.entries(env)
            .map(([k, v]) => `${k}=${v}`)
            .sort(),
        );
      }),
      { numRuns: 15 },
    );
  });

  it('working dir, stdin from /dev/null, its own process group, output order and exit code', async () => {
    const script =
      'pwd; readlink /proc/self/fd/0; cut -d" " -f5 /proc/$$/stat; echo $$; echo e >&2; echo last; exit 3';
    const { out, err, outcome, pgid, launcherPid } = await step(script);
    expect(out[0]).toBe(dir);
    expect(out[1]).toBe('/dev/null');
    // The shell leads its own group, and it is the process the agent handed the step to.
    expect(out[2]).toBe(out[3]);
    expect(Number(out[3])).toBe(pgid);
    expect(pgid).toBe(launcherPid);
    expect(out[4]).toBe('last');
    expect(err).toEqual(['e']);
    expect(outcome).toMatchObject({ exitCode: 3, timedOut: false, cancelled: false });
  });

  it('a cancel stops the whole tree; a timeout reports itself', async () => {
    const cancelled = await step('sleep 30 & echo $!; wait', { cancelAfterLine: true });
    expect(cancelled.outcome.cancelled).toBe(true);
    const child = Number(cancelled.out[0]);
    await expect.poll(() => alive(child), { timeout: 5_000 }).toBe(false);
    const timed = await step('sleep 30', { timeoutMs: 100 });
    expect(timed.outcome.timedOut).toBe(true);
    expect(timed.outcome.exitCode).toBe(128 + 15);
  });

  it('a variable name the shell cannot export: the step is spawned directly, the launcher stopped', async () => {
    const env = { PATH: process.env.PATH, 'DASHED-NAME': 'x' };
    expect(handOver({ script: 'true', cwd: dir, env })).toBeUndefined();
    const { out, pgid, launcherPid } = await step(ENV_OF_SHELL, { env });
    expect(decodeEnv(out[0]!)).toContain('DASHED-NAME=x');
    expect(pgid).not.toBe(launcherPid);
    await expect.poll(() => alive(launcherPid!), { timeout: 5_000 }).toBe(false);
  });

  it('a launcher killed while it waited is not used: the step runs all the same', async () => {
    const l = spawnLauncher()!;
    const gone = new Promise((r) => l.child.once('exit', r));
    process.kill(l.child.pid!, 'SIGKILL');
    await gone;
    const out: string[] = [];
    const s = runStep({ script: 'echo ok', cwd: dir, env: {}, launcher: l, onLine: (_, x) => out.push(x) });
    expect((await s.done).exitCode).toBe(0);
    expect(out).toEqual(['ok']);
    expect(s.pgid).not.toBe(l.child.pid);
  });
});

describe('the agent slot of one spare launcher', () => {
  it('gives each launcher once; two jobs get two processes, and the first job env never reaches the second', async () => {
    const slot = new LauncherSlot();
    const run = async (id: string, env: Record<string, string>) => {
      slot.fill();
      const spare = slot.sparePid;
      const msgs: AgentMessage[] = [];
      const runner = new JobRunner({
        job: { id, runId: 'r', name: id, env, steps: [{ name: 's', run: `echo $$; ${ENV_OF_SHELL}` }] },
        send: (m) => msgs.push(m),
        launcher: () => slot.take(),
      });
      expect(await runner.run()).toBe('succeeded');
      const lines = msgs.flatMap((m) => (m.type === 'log' && m.stream === 'stdout' ? m.lines : []));
      return { spare, pid: Number(lines[0]), env: decodeEnv(lines[1]!) };
    };
    const a = await run('job-a', { SECRET_OF_A: 'a-only' });
    expect(slot.take()).toBeUndefined(); // taken once
    const b = await run('job-b', {});
    expect(a.pid).toBe(a.spare);
    expect(b.pid).toBe(b.spare);
    expect(b.pid).not.toBe(a.pid);
    expect(a.env).toContain('SECRET_OF_A=a-only');
    expect(b.env.some((e) => e.includes('SECRET_OF_A') || e.includes('a-only'))).toBe(false);
    expect(alive(a.pid)).toBe(false);
    slot.close();
  });

  it('a spare is told to the dead-man switch while idle; a job using it does not tell it again', async () => {
    const deadMan = new DeadManSwitch(true);
    const told: (number | undefined)[] = [];
    const guard = deadMan.guard.bind(deadMan);
    deadMan.guard = (pgid) => {
      told.push(pgid);
      guard(pgid);
    };
    const slot = new LauncherSlot();
    slot.fill(deadMan);
    const spare = slot.sparePid;
    expect(told).toEqual([spare]);
    const runner = new JobRunner({
      job: {
        id: 'job-g',
        runId: 'r',
        name: 'g',
        env: {},
        steps: [
          { name: 'a', run: 'true' },
          { name: 'b', run: 'true' },
        ],
      },
      send: () => undefined,
      deadMan,
      launcher: () => slot.take(),
    });
    expect(await runner.run()).toBe('succeeded');
    // The second step was spawned directly and told once; the first was not told twice.
    expect(told.length).toBe(2);
    expect(told[1]).not.toBe(spare);
    deadMan.disarm();
    slot.close();
  });

  it('a job that runs no step still uses up the spare: it is stopped, not kept for the next job', async () => {
    const slot = new LauncherSlot();
    slot.fill();
    const spare = slot.sparePid!;
    const runner = new JobRunner({
      job: { id: 'job-c', runId: 'r', name: 'c', env: {}, steps: [{ name: 's', run: 'true' }] },
      send: () => undefined,
      launcher: () => slot.take(),
    });
    runner.cancel();
    expect(await runner.run()).toBe('cancelled');
    expect(slot.sparePid).toBeUndefined();
    await expect.poll(() => alive(spare), { timeout: 5_000 }).toBe(false);
  });

  it('close() stops the spare and starts no other', async () => {
    const slot = new LauncherSlot();
    slot.fill();
    const pid = slot.sparePid!;
    expect(alive(pid)).toBe(true);
    slot.close();
    await expect.poll(() => alive(pid), { timeout: 5_000 }).toBe(false);
    slot.fill();
    expect(slot.sparePid).toBeUndefined();
  });

  it('an idle launcher leaves by itself when the agent dies outright', async () => {
    // A separate Node process (the built agent code) holds a launcher and is then killed with SIGKILL: no clean-up runs.
    const holder = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const { spawnLauncher } = await import(${JSON.stringify(new URL('../../../dist/agent/step-launcher.js', import.meta.url).href)});
         const l = spawnLauncher(); console.log(l.child.pid); setInterval(() => {}, 1000);`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const pid = await new Promise<number>((resolve) =>
      holder.stdout.once('data', (d: Buffer) => resolve(Number(String(d).trim()))),
    );
    expect(alive(pid)).toBe(true);
    const dead = new Promise((r) => holder.once('exit', r));
    holder.kill('SIGKILL');
    await dead;
    await expect.poll(() => alive(pid), { timeout: 5_000 }).toBe(false);
  });
});
