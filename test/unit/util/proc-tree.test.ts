/**
 * The /proc scan that finds a job's escaped processes by their marker variable: with a start-time
 * cut-off (a job's end used to read every process's environment on the host) it still finds every
 * marked process started at or after the cut-off, and reads none older.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { markCounters } from '../../../src/util/pid-window.js';
import { stopAgentTree } from '../../../src/scaler/backends/bare-metal/process-group.js';
import {
  findProcesses,
  pidsInSession,
  processGroupOf,
  readProcFile,
  startTicksOf,
  stopProcesses,
} from '../../../src/util/proc-tree.js';

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

function marked(marker: string): ChildProcess {
  const c = spawn('sleep', ['30'], { env: { ...process.env, KICI_TEST_MARK: marker }, stdio: 'ignore' });
  children.push(c);
  return c;
}

describe('proc-tree (Linux /proc)', () => {
  it('startTicksOf reads a start time: ours is not after a child started later; a gone pid has none', () => {
    const child = marked('t0');
    const [mine, theirs] = [startTicksOf(process.pid), startTicksOf(child.pid!)];
    expect(Number.isInteger(mine)).toBe(true);
    expect(theirs!).toBeGreaterThanOrEqual(mine!);
    expect(startTicksOf(2 ** 30)).toBeUndefined();
  });

  it('a cut-off finds the marked processes born at or after it and skips older ones', async () => {
    const marker = `m-${process.pid}-${Date.now()}`;
    const older = marked(marker);
    // Start times are in clock ticks (10 ms): wait until the next one so the two differ.
    const olderTicks = startTicksOf(older.pid!)!;
    let younger = marked(marker);
    while (startTicksOf(younger.pid!)! <= olderTicks) {
      younger.kill('SIGKILL');
      await new Promise((r) => setTimeout(r, 15));
      younger = marked(marker);
    }
    const env = `KICI_TEST_MARK=${marker}`;
    expect((await findProcesses({ env })).sort()).toEqual([older.pid, younger.pid].sort());
    const from = startTicksOf(younger.pid!)!;
    expect(await findProcesses({ env, bornFromTicks: from })).toEqual([younger.pid]);
    expect(await findProcesses({ env, bornFromTicks: olderTicks })).toHaveLength(2);
    expect(await findProcesses({ env, bornFromTicks: from + 1 })).toEqual([]);
    // And the stop that uses it signals exactly the younger one.
    const exited = new Promise((r) => younger.once('exit', r));
    expect(await stopProcesses({ env, bornFromTicks: from }, 2_000)).toBe(1);
    await exited;
    expect(older.exitCode === null && older.signalCode === null).toBe(true);
  });

  it('a pid mark finds the marked processes started after it, a double-forked one too, and no older one', async () => {
    const marker = `p-${process.pid}-${Date.now()}`;
    const older = marked(marker);
    const counters = markCounters();
    expect(counters).toBeDefined();
    const first = marked(marker);
    // Leaves its parent's process group and its parent: only the marker finds it.
    const escaped = spawn('setsid', ['-f', 'sleep', '30'], {
      env: { ...process.env, KICI_TEST_MARK: marker },
      stdio: 'ignore',
    });
    children.push(escaped);
    await new Promise((r) => escaped.once('exit', r));
    const env = `KICI_TEST_MARK=${marker}`;
    const all = await findProcesses({ env });
    expect(all).toHaveLength(3);
    const young = await findProcesses({ env, bornFromPid: { pid: first.pid!, ...counters! } });
    expect(young.sort()).toEqual(all.filter((p) => p !== older.pid).sort());
    expect(await stopProcesses({ env, bornFromPid: { pid: first.pid!, ...counters! } }, 2_000)).toBe(2);
    expect(await findProcesses({ env })).toEqual([older.pid]);
  });

  it('a process whose environment reads empty is reported unsure, not matched, and the stop still ends', async () => {
    const from = startTicksOf(process.pid)!;
    // No environment at all: what a process in the middle of an exec shows for a moment.
    const bare = spawn('env', ['-i', 'sleep', '30'], { stdio: 'ignore' });
    children.push(bare);
    const marker = `KICI_TEST_MARK=u-${process.pid}-${Date.now()}`;
    let unsure: number[] = [];
    // `env -i` execs sleep: until it has, the process still shows the test's environment.
    while (!unsure.includes(bare.pid!)) {
      unsure = [];
      expect(await findProcesses({ env: marker, bornFromTicks: from }, unsure)).toEqual([]);
      if (!unsure.includes(bare.pid!)) await new Promise((r) => setTimeout(r, 5));
    }
    expect(await stopProcesses({ env: marker, bornFromTicks: from }, 2_000)).toBe(0);
    expect(bare.exitCode === null && bare.signalCode === null).toBe(true);
  });

  it('reads a /proc file whole through the shared buffer, past its first size, and throws for a gone pid', () => {
    // An environment far larger than the buffer's first 4 KiB, its end marked to show nothing was cut.
    const big = 'x'.repeat(100_000);
    const c = spawn('sleep', ['30'], {
      env: { KICI_TEST_BIG: big, KICI_TEST_END: 'end', KICI_TEST_UTF: 'größe' },
      stdio: 'ignore',
    });
    children.push(c);
    const env = readProcFile(`/proc/${c.pid!}/environ`).split('\0');
    expect(env).toContain(`KICI_TEST_BIG=${big}`);
    expect(env).toContain('KICI_TEST_END=end');
    // Bytes as they are by default (latin1); decoded when asked.
    expect(env).not.toContain('KICI_TEST_UTF=größe');
    expect(readProcFile(`/proc/${c.pid!}/environ`, 'utf8').split('\0')).toContain('KICI_TEST_UTF=größe');
    // A small file read after the large one is not padded with the large one's bytes.
    expect(readProcFile(`/proc/${c.pid!}/comm`)).toBe('sleep\n');
    expect(() => readProcFile(`/proc/${2 ** 30}/stat`)).toThrow(/ENOENT/);
  });

  it('pidsInSession finds a process that left its group but not its session, and nothing outside it', async () => {
    // `detached` makes the shell a session leader; its background child moves to a group of its
    // own (perl's setpgrp; perl is part of every Debian base system) and stays in the session.
    const leader = spawn('sh', ['-c', `perl -e 'setpgrp(0, 0); print "$$\\n"; exec "sleep", "30"' & wait`], {
      detached: true,
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    children.push(leader);
    const bgPid = Number(
      await new Promise<string>((r) => leader.stdout!.once('data', (d: Buffer) => r(String(d)))),
    );
    expect(processGroupOf(bgPid)).toBe(bgPid);
    const other = marked('outside');
    const found = await pidsInSession(leader.pid!);
    expect(found.sort()).toEqual([leader.pid!, bgPid].sort());
    expect(found).not.toContain(other.pid);
    process.kill(bgPid, 'SIGKILL');
    process.kill(-leader.pid!, 'SIGKILL');
  });

  it("stopAgentTree with the agent's start time still stops a descendant that left its session", async () => {
    const id = `a-${process.pid}-${Date.now()}`;
    // The "agent": a group leader whose child escapes with setsid, keeping the agent's id.
    const agent = spawn('sh', ['-c', 'setsid -f sleep 30; exec sleep 30'], {
      detached: true,
      env: { ...process.env, KICI_AGENT_ID: id },
      stdio: 'ignore',
    });
    children.push(agent);
    const ticks = startTicksOf(agent.pid!)!;
    const env = `KICI_AGENT_ID=${id}`;
    // sh forks to run setsid, and setsid -f forks again before exec'ing sleep: until both
    // intermediates are gone, more than one other process carries the id. Wait for the settled
    // shape (the agent and one escaped process, both exec'd into sleep), not for a count.
    const comm = (pid: number): string => {
      try {
        return readProcFile(`/proc/${pid}/comm`).trim();
      } catch {
        return '';
      }
    };
    const settled = async (): Promise<number[] | undefined> => {
      const others = (await findProcesses({ env })).filter((p) => p !== agent.pid);
      const ok = others.length === 1 && comm(others[0]!) === 'sleep' && comm(agent.pid!) === 'sleep';
      return ok ? others : undefined;
    };
    let escaped: number[] | undefined;
    while (!(escaped = await settled())) await new Promise((r) => setTimeout(r, 5));
    expect(processGroupOf(escaped[0]!)).not.toBe(processGroupOf(agent.pid!));
    await stopAgentTree(id, agent.pid!, 2_000, ticks);
    expect(await findProcesses({ env })).toEqual([]);
  });
});
