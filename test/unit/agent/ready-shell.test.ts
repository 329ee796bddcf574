import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { JOB_MARKER_ENV, JobRunner } from '../../../src/agent/job-runner.js';
import { handOverLine, ReadyShell } from '../../../src/agent/ready-shell.js';
import { readyShellMismatch } from '../../../src/agent/ready-shell-probe.js';
import { ReadyShells } from '../../../src/agent/ready-shells.js';
import type { AgentMessage } from '../../../src/protocol/messages.js';

const dir = mkdtempSync(join(tmpdir(), 'kici-ready-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Outcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  out: string;
  err: string;
}

function collect(child: ChildProcess, pid: number): Promise<Outcome> {
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += String(d)));
  child.stderr!.on('data', (d: Buffer) => (err += String(d)));
  // The step's own pid differs between the two ways; everything else must not.
  const strip = (s: string) => s.replaceAll(String(pid), '<pid>');
  return new Promise((ok) =>
    child.once('close', (code, signal) => ok({ code, signal, out: strip(out), err: strip(err) })),
  );
}

/** Gone, or a zombie nobody has reaped yet: either way it runs no more. */
function ended(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.startsWith('Z');
  } catch {
    return true;
  }
}

/** The agent's ready shells once the host check has passed (it starts the first one). */
async function readyShells(): Promise<ReadyShells> {
  const shells = new ReadyShells();
  expect(await shells.checked()).toBe(true);
  return shells;
}

/** The step as the agent always started it: a new /bin/sh -c. */
function direct(script: string, cwd: string, env: NodeJS.ProcessEnv): Promise<Outcome> {
  const c = spawn('/bin/sh', ['-c', script], { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  return collect(c, c.pid!);
}

/** The same step handed to a shell started before it was known. */
function handedOver(script: string, cwd: string, env: NodeJS.ProcessEnv): Promise<Outcome> {
  const shell = ReadyShell.start();
  if (!shell) throw new Error('this host cannot start a ready shell');
  const done = collect(shell.child, shell.child.pid!);
  expect(shell.handOver(script, cwd, env)).toBe(true);
  return done;
}

// What a step sees of itself: its environment as the kernel holds it, its argv, its directory and
// open descriptors (one line each, so that a difference shows in the diff of the outputs).
const SELF = [
  `tr '\\0' '\\n' < /proc/$$/environ | sort`,
  `tr '\\0' '|' < /proc/$$/cmdline; echo`,
  'pwd; pwd -P; echo "PWD=$PWD OLDPWD=${OLDPWD-unset} 0=$0 #=$#"',
  // A glob, not ls in a pipe: the shell's own pipe to ls would show among its descriptors.
  'for f in /proc/$$/fd/*; do printf "%s " "${f##*/}"; done; echo',
  'readlink /proc/$$/fd/0',
].join('\n');

describe('a step handed to a ready shell is the process a direct spawn makes', () => {
  it('same environment, argv, directory, descriptors and output, for any variables', async () => {
    const name = fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,12}$/);
    const value = fc.string({ unit: 'grapheme', maxLength: 40 }).filter((v) => !v.includes('\0'));
    await fc.assert(
      fc.asyncProperty(fc.dictionary(name, value, { maxKeys: 6 }), async (vars) => {
        const env = { PATH: process.env.PATH, ...vars };
        const a = await direct(SELF, dir, env);
        const b = await handedOver(SELF, dir, env);
        expect(b).toEqual(a);
        expect(a.code).toBe(0);
      }),
      { numRuns: 15 },
    );
  });

  it.each([
    ['a command that is not found', 'nosuchcommand-kici'],
    ['a syntax error after output', 'echo a\nif'],
    ['set -e stops at the first failure', 'set -e\nfalse\necho not-reached'],
    ['an exit code', 'exit 7'],
    ['standard input is empty', 'cat; echo "read to the end"'],
    ['an EXIT trap', 'trap "echo bye" EXIT; echo hi'],
    ['a signal to itself', 'kill -TERM $$'],
    ['quotes of every kind', `printf '%s\\n' "it's" 'say "hi"' \\$HOME \`echo tick\``],
    ['an unset variable under set -u', 'set -u; echo $NOT_SET_KICI'],
    ['IFS from the environment does not split', 'x="a b:c"; for w in $x; do echo "<$w>"; done'],
  ])('%s', async (_what, script) => {
    const env = { PATH: process.env.PATH, IFS: ':', PWD: '/etc', OLDPWD: '/nowhere' };
    expect(await handedOver(script, dir, env)).toEqual(await direct(script, dir, env));
  });

  it('a variable the shell cannot export is not handed over, and that step is spawned instead', async () => {
    expect(handOverLine('true', dir, { 'a.b': '1' })).toBeUndefined();
    expect(handOverLine('true', dir, { A: 'a\0b' })).toBeUndefined();
    expect(handOverLine('true', dir, { A: "it's" })).toContain(`A='it'\\''s'`);
    const shells = await readyShells();
    const msgs: AgentMessage[] = [];
    const runner = new JobRunner({
      job: {
        id: 'job-odd',
        runId: 'r',
        name: 'u',
        env: { 'odd.name': 'kept' },
        steps: [{ name: 's', run: "tr '\\0' '\\n' < /proc/$$/environ | grep '^odd.name='" }],
      },
      send: (m) => msgs.push(m),
      shells,
    });
    expect(await runner.run()).toBe('succeeded');
    expect(msgs.flatMap((m) => (m.type === 'log' ? m.lines : []))).toEqual(['odd.name=kept']);
    // The waiting shell was taken by that step, and let go when it could not be handed over.
    expect(shells.take()).toBeUndefined();
    shells.close();
  });

  it('the host check passes for this shell, and fails for a shell that adds variables of its own', async () => {
    expect(await readyShellMismatch('/bin/sh')).toBeUndefined();
    // bash puts `_` (and SHLVL) into the environment of what it executes.
    expect(await readyShellMismatch('/bin/bash')).toMatch(/passes on more than the step's own variables/);
  });

  it('where the check fails no shell is started ahead, and the operator is told why once', async () => {
    const told: string[] = [];
    const shells = new ReadyShells(
      true,
      async () => 'it adds _',
      (why) => told.push(why),
    );
    expect(await shells.checked()).toBe(false);
    shells.prepare();
    shells.prepareWhenIdle(1);
    expect(shells.take()).toBeUndefined();
    expect(told).toEqual(['it adds _']);
  });

  it('a ready shell nobody takes leaves when discarded, and one taken is not handed out again', async () => {
    const shells = await readyShells();
    const shell = shells.take()!;
    expect(shell.usable).toBe(true);
    expect(shells.take()).toBeUndefined();
    const exited = new Promise((ok) => shell.child.once('exit', ok));
    shell.discard();
    expect(shell.usable).toBe(false);
    await exited;
    shells.prepare();
    const other = shells.take()!;
    const gone = new Promise((ok) => other.child.once('exit', ok));
    shells.prepare();
    shells.close();
    other.discard();
    await gone;
    expect(shells.take()).toBeUndefined();
  });

  it('a ready shell that died while waiting is not used: the step is spawned instead', async () => {
    const shells = await readyShells();
    const shell = shells.take()!;
    const died = new Promise((ok) => shell.child.once('exit', ok));
    process.kill(shell.child.pid!, 'SIGKILL');
    await died;
    expect(shell.usable).toBe(false);
  });
});

describe('jobs on ready shells', () => {
  function job(steps: string[]) {
    return {
      id: `job-${Math.random().toString(16).slice(2)}`,
      runId: 'run-1',
      name: 'unit',
      env: { KICI_TEST_VALUE: "it's\nthere" },
      steps: steps.map((run, i) => ({ name: `s${i}`, run })),
    };
  }
  const stdout = (msgs: AgentMessage[], idx: number) =>
    msgs.flatMap((m) => (m.type === 'log' && m.idx === idx && m.stream === 'stdout' ? m.lines : []));

  /** Records the pid of every shell a step takes. */
  class TakenShells extends ReadyShells {
    readonly pids: number[] = [];
    override take() {
      const s = super.take();
      if (s) this.pids.push(s.child.pid!);
      return s;
    }
  }

  it('each step runs on the shell prepared for it, with the job marker and the job env', async () => {
    const shells = new TakenShells();
    expect(await shells.checked()).toBe(true);
    const msgs: AgentMessage[] = [];
    const runner = new JobRunner({
      job: job([
        `echo "pid=$$"; tr '\\0' '\\n' < /proc/$$/environ | grep -c '^${JOB_MARKER_ENV}='; printf '%s\\n' "$KICI_TEST_VALUE"`,
        'echo "pid=$$"',
      ]),
      send: (m) => msgs.push(m),
      shells,
    });
    expect(await runner.run()).toBe('succeeded');
    shells.close();
    // The second step's shell was started while the first ran, and each step is its shell.
    expect(shells.pids).toHaveLength(2);
    expect(stdout(msgs, 0)).toEqual([`pid=${shells.pids[0]}`, '1', "it's", 'there']);
    expect(stdout(msgs, 1)).toEqual([`pid=${shells.pids[1]}`]);
  });

  it('what a step on a ready shell leaves running is stopped when the job ends', async () => {
    const shells = await readyShells();
    const pidFile = join(dir, 'daemon.pid');
    const runner = new JobRunner({
      job: job([
        `setsid sh -c 'echo $$ > ${pidFile}; exec sleep 300' > /dev/null 2>&1 & while [ ! -s ${pidFile} ]; do :; done`,
      ]),
      send: () => undefined,
      shells,
      reapGraceMs: 200,
    });
    expect(await runner.run()).toBe('succeeded');
    shells.close();
    const pid = Number(readFileSync(pidFile, 'utf8'));
    expect(pid).toBeGreaterThan(0);
    expect(existsSync(`/proc/${pid}`) && !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ')).toBe(
      false,
    );
  });

  it('a first step spawned directly with no mark read leaves nothing behind though a later step ran on a ready shell', async () => {
    // The first step cannot be handed over (a variable the shell cannot export) and reads no pid
    // counters, since it took a ready shell. The second step's shell is started only once the
    // first step's daemon runs, so the daemon is older than that shell's mark: the job's end must
    // then read every process, not only those younger than the mark.
    class LateShells extends ReadyShells {
      allow = false;
      override prepare() {
        if (this.allow) super.prepare();
      }
    }
    const shells = new LateShells();
    expect(await shells.checked()).toBe(true);
    shells.allow = true;
    shells.prepare();
    shells.allow = false;
    const pidFile = join(dir, 'early-daemon.pid');
    const go = join(dir, 'go');
    const runner = new JobRunner({
      job: {
        ...job([]),
        steps: [
          {
            name: 'first',
            env: { 'odd.name': 'x' },
            run: `setsid sh -c 'echo $$ > ${pidFile}; exec sleep 300' > /dev/null 2>&1 & while [ ! -s ${pidFile} ]; do :; done; echo daemon up; while [ ! -e ${go} ]; do sleep 0.01; done`,
          },
          { name: 'second', run: 'true' },
        ],
      },
      send: (m) => {
        if (m.type === 'log' && m.lines.includes('daemon up')) {
          shells.allow = true;
          shells.prepare();
          shells.allow = false;
          writeFileSync(go, '');
        }
      },
      shells,
      reapGraceMs: 200,
    });
    expect(await runner.run()).toBe('succeeded');
    shells.close();
    const pid = Number(readFileSync(pidFile, 'utf8'));
    expect(ended(pid)).toBe(true);
  });

  it('a cancelled step on a ready shell is stopped', async () => {
    const shells = await readyShells();
    const msgs: AgentMessage[] = [];
    const runner = new JobRunner({
      job: job(['echo started; sleep 300']),
      send: (m) => {
        msgs.push(m);
        if (m.type === 'log' && m.lines.includes('started')) runner.cancel();
      },
      shells,
    });
    expect(await runner.run()).toBe('cancelled');
    shells.close();
    expect(stdout(msgs, 0)).toEqual(['started']);
  });
});
