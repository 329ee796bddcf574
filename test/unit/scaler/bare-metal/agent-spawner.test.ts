import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AgentSpawner,
  RelayedChild,
  restartBackoff,
} from '../../../../src/scaler/backends/bare-metal/spawner/agent-spawner.js';
import type { AgentChild } from '../../../../src/scaler/backends/bare-metal/spawner/agent-child.js';
import { TOKEN_FD } from '../../../../src/scaler/backends/bare-metal/env.js';

/**
 * The agent spawner: a real spawner process starting real shell processes in place of agents.
 * Readiness is awaited on the spawner's own answer (its pid appears), never on time.
 */
const open: AgentSpawner[] = [];
const made: string[] = [];
afterEach(async () => {
  for (const s of open.splice(0)) s.close();
  for (const d of made.splice(0)) await rm(d, { recursive: true, force: true });
});

/** Starts `s` and resolves with its pid once it said it is ready (looked at every turn). */
function started(s: AgentSpawner): Promise<number> {
  open.push(s);
  s.start();
  return new Promise<number>((ok) => {
    const look = () => (s.pid !== undefined ? ok(s.pid) : setImmediate(look));
    look();
  });
}

async function readySpawner(onGone?: (why: string) => void): Promise<AgentSpawner> {
  const s = new AgentSpawner(onGone);
  await started(s);
  return s;
}

/** The child's output lines as they come; `seen` resolves once at least that many have come. */
function lines(child: AgentChild): {
  out: string[];
  err: string[];
  seen(out: number, err: number): Promise<void>;
} {
  const waiters: (() => void)[] = [];
  const got = {
    out: [] as string[],
    err: [] as string[],
    seen: (out: number, err: number) =>
      new Promise<void>((ok) => {
        const look = () => (got.out.length >= out && got.err.length >= err ? ok() : waiters.push(look));
        look();
      }),
  };
  const arrived = () => {
    for (const w of waiters.splice(0)) w();
  };
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stdout.on('data', (d: string) => (got.out.push(...d.split('\n').filter(Boolean)), arrived()));
  child.stderr.on('data', (d: string) => (got.err.push(...d.split('\n').filter(Boolean)), arrived()));
  return got;
}

const closed = (c: AgentChild) =>
  new Promise<[number | null, NodeJS.Signals | null]>((ok) => c.onClose((code, sig) => ok([code, sig])));

async function statOf(pid: number): Promise<{ ppid: number; pgid: number }> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { ppid: Number(rest[1]), pgid: Number(rest[2]) };
}

/** Resolves once the spawner's /proc entry is gone (its exit is the class's to hear, not ours). */
function spawnerGone(pid: number): Promise<void> {
  return new Promise<void>((ok) => {
    const look = (): void =>
      void statOf(pid).then(
        () => setTimeout(look, 20),
        () => ok(),
      );
    look();
  });
}

/** Two directories with a file each, as an agent's home and uid claim would be. */
async function undoPaths(): Promise<{ paths: string[]; exist(): Promise<boolean[]> }> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-undo-'));
  made.push(dir);
  const paths = [join(dir, 'home'), join(dir, 'claim')];
  for (const p of paths) {
    await mkdir(p);
    await writeFile(join(p, 'f'), 'x');
  }
  return {
    paths,
    exist: () =>
      Promise.all(
        paths.map((p) =>
          stat(p).then(
            () => true,
            () => false,
          ),
        ),
      ),
  };
}

/** A ready spawner with one provisional start of a sleeping shell, and whether its two paths exist. */
async function provisionalSleeper() {
  const s = await readySpawner();
  const { paths, exist } = await undoPaths();
  const child = await s.spawn(
    { file: '/bin/sh', args: ['-c', 'sleep 60'], env: { PATH: '/usr/bin:/bin' }, token: 't' },
    { undo: paths },
  )!;
  return { s, pid: s.pid!, child, exist };
}

describe('agent spawner', () => {
  it('starts a process in its own group with exactly the given environment, hands the token on fd 3, relays output, then the exit', async () => {
    const s = await readySpawner();
    const child = await s.spawn({
      file: '/bin/sh',
      args: [
        '-c',
        `read t <&${TOKEN_FD}; echo "tok=$t"; echo "env=$ONLY_THIS"; echo oops >&2; sleep 60; exit 3`,
      ],
      env: { PATH: '/usr/bin:/bin', ONLY_THIS: 'yes' },
      token: 'secret-token',
    })!;
    const got = lines(child);
    const st = await statOf(child.pid);
    expect(st.pgid).toBe(child.pid);
    expect(st.ppid).toBe(s.pid);
    const environ = (await readFile(`/proc/${child.pid}/environ`, 'utf8')).split('\0').filter(Boolean);
    expect(environ.sort()).toEqual(['ONLY_THIS=yes', 'PATH=/usr/bin:/bin']);
    // Its three lines first: killed before it wrote them, a busy host's shell has nothing to relay.
    await got.seen(2, 1);
    // The whole group, as a teardown does: 'close' waits for every holder of the output pipes.
    process.kill(-child.pid, 'SIGKILL');
    expect(await closed(child)).toEqual([null, 'SIGKILL']);
    expect(got.out).toEqual(['tok=secret-token', 'env=yes']);
    expect(got.err).toEqual(['oops']);
  });

  it('every line is relayed before the exit is reported', async () => {
    const s = await readySpawner();
    const child = await s.spawn({
      file: '/bin/sh',
      args: ['-c', 'i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done; exit 0'],
      env: { PATH: '/usr/bin:/bin' },
      token: 't',
    })!;
    const got = lines(child);
    expect(await closed(child)).toEqual([0, null]);
    expect(got.out.length).toBe(2000);
    expect(got.out[1999]).toBe('line 1999');
  });

  it('a binary that cannot start fails with its errno code, as a direct spawn does', async () => {
    const s = await readySpawner();
    await expect(
      s.spawn({ file: '/nonexistent/kici-agent', args: [], env: {}, token: 't' })!,
    ).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('the spawner runs in a group of its own, without the orchestrator environment', async () => {
    process.env.KICI_TEST_SHOULD_NOT_LEAK = 'x';
    const s = await readySpawner();
    delete process.env.KICI_TEST_SHOULD_NOT_LEAK;
    const st = await statOf(s.pid!);
    expect(st.pgid).toBe(s.pid);
    expect(await readFile(`/proc/${s.pid}/environ`, 'utf8')).not.toContain('KICI_TEST_SHOULD_NOT_LEAK');
  });

  it('close ends the spawner and leaves its agents running; later spawns answer undefined', async () => {
    const s = await readySpawner();
    const pid = s.pid!;
    const child = await s.spawn({
      file: '/bin/sh',
      args: ['-c', 'sleep 60'],
      env: { PATH: '/usr/bin:/bin' },
      token: 't',
    })!;
    const gone = new Promise<void>((ok) => {
      // Polls the spawner's /proc entry (its exit is not ours to wait on: it is the class's child).
      const look = (): void =>
        void statOf(pid).then(
          () => setTimeout(look, 20),
          () => ok(),
        );
      look();
    });
    s.close();
    await gone;
    expect((await statOf(child.pid)).ppid).not.toBe(pid);
    expect(s.spawn({ file: '/bin/true', args: [], env: {}, token: 't' })).toBeUndefined();
    process.kill(-child.pid, 'SIGKILL');
  });

  it('a provisional start not settled when the spawner ends is killed, then its paths are removed', async () => {
    const { s, pid, child, exist } = await provisionalSleeper();
    const ended = spawnerGone(pid);
    // What the orchestrator's death does to the spawner: its input ends.
    s.close();
    await ended;
    // The spawner waited for the agent's exit before it removed anything and exited itself.
    await expect(statOf(child.pid)).rejects.toThrow();
    expect(await exist()).toEqual([false, false]);
  });

  it('a provisional start settled before the spawner ends runs on, its paths untouched', async () => {
    const { s, pid, child, exist } = await provisionalSleeper();
    child.settle!();
    const ended = spawnerGone(pid);
    s.close();
    await ended;
    expect((await statOf(child.pid)).ppid).not.toBe(pid);
    expect(await exist()).toEqual([true, true]);
    process.kill(-child.pid, 'SIGKILL');
  });

  it("a provisional start that exited on its own is not undone later: its paths may be another agent's by then", async () => {
    const s = await readySpawner();
    const pid = s.pid!;
    const { paths, exist } = await undoPaths();
    const child = await s.spawn(
      { file: '/bin/sh', args: ['-c', 'exit 0'], env: { PATH: '/usr/bin:/bin' }, token: 't' },
      { undo: paths },
    )!;
    await closed(child);
    const ended = spawnerGone(pid);
    s.close();
    await ended;
    expect(await exist()).toEqual([true, true]);
  });

  it('a spawner killed with a request in flight fails it with ESPAWNER and says why once', async () => {
    const why: string[] = [];
    const s = await readySpawner((w) => why.push(w));
    const pid = s.pid!;
    process.kill(pid, 'SIGSTOP');
    const inFlight = s.spawn({ file: '/bin/true', args: [], env: {}, token: 't' })!;
    process.kill(pid, 'SIGKILL');
    await expect(inFlight).rejects.toMatchObject({ code: 'ESPAWNER' });
    expect(why).toEqual(['exited with signal SIGKILL']);
    expect(s.spawn({ file: '/bin/true', args: [], env: {}, token: 't' })).toBeUndefined();
  });

  it("a killed spawner is started again, and agents started after that are the new one's children", async () => {
    const readies: boolean[] = [];
    let readyAgain = () => {};
    const again = new Promise<void>((ok) => (readyAgain = ok));
    const s = new AgentSpawner(undefined, {
      restartAfterMs: () => 0,
      onReady: (restarted) => {
        readies.push(restarted);
        if (restarted) readyAgain();
      },
    });
    const first = await started(s);
    process.kill(first, 'SIGKILL');
    await again;
    expect(readies).toEqual([false, true]);
    expect(s.pid).toBeDefined();
    expect(s.pid).not.toBe(first);
    const child = await s.spawn({ file: '/bin/sh', args: ['-c', 'sleep 60'], env: {}, token: 't' })!;
    expect((await statOf(child.pid)).ppid).toBe(s.pid);
    process.kill(-child.pid, 'SIGKILL');
    expect(await closed(child)).toEqual([null, 'SIGKILL']);
  });

  it('a spawner that dies before it is ready is tried again with the count of deaths in a row, until the policy says no', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kici-spawner-'));
    const entry = join(dir, 'dies.mjs');
    await writeFile(entry, 'process.exit(7);\n');
    const asked: number[] = [];
    const why: string[] = [];
    let stopped = () => {};
    const done = new Promise<void>((ok) => (stopped = ok));
    const s = new AgentSpawner((w) => why.push(w), {
      entry,
      restartAfterMs: (n) => {
        asked.push(n);
        if (n < 3) return 0;
        stopped();
        return undefined;
      },
    });
    open.push(s);
    s.start();
    await done;
    await rm(dir, { recursive: true, force: true });
    expect(asked).toEqual([1, 2, 3]);
    expect(why).toEqual(['exited with code 7', 'exited with code 7', 'exited with code 7']);
    expect(s.restartPending).toBe(false);
    expect(s.spawn({ file: '/bin/true', args: [], env: {}, token: 't' })).toBeUndefined();
  });

  it('close cancels a start again that is waiting for its pause', async () => {
    let gone = () => {};
    const died = new Promise<void>((ok) => (gone = ok));
    const s = new AgentSpawner(() => gone(), { restartAfterMs: () => 60_000 });
    const pid = await started(s);
    process.kill(pid, 'SIGKILL');
    await died;
    expect(s.restartPending).toBe(true);
    s.close();
    expect(s.restartPending).toBe(false);
  });

  it('the default pause doubles from 1 s while the spawner keeps dying, and never passes a minute', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 8, 50].map(restartBackoff)).toEqual([
      1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000,
    ]);
  });

  it('an exit already relayed is still told on a later turn, as a child process would (never inside onClose)', async () => {
    const s = await readySpawner();
    const child = await s.spawn({ file: '/bin/sh', args: ['-c', 'exit 4'], env: {}, token: 't' })!;
    expect(await closed(child)).toEqual([4, null]);
    // The backend attaches its exit handler during its own start; an agent that already died must
    // be reported after that start returns, not in the middle of it.
    let returned = false;
    const late = new Promise<boolean>((ok) => child.onClose(() => ok(returned)));
    returned = true;
    expect(await late).toBe(true);
  });

  it('output and exit relayed in the same read as the start still reach a reader that attaches once the start resolves', async () => {
    // The spawner's pid, output and exit lines for an agent that dies at once can come in one read.
    // The backend attaches its readers in the continuation of its start, after that read's own
    // ticks have run: the lines must still be there, and the exit told after them.
    const relayed = new RelayedChild(1);
    const started = new Promise<RelayedChild>((ok) =>
      setImmediate(() => {
        ok(relayed);
        relayed.output(2, 'cannot reach the orchestrator\n');
        relayed.close(4, null);
      }),
    );
    const child = await started;
    const got = lines(child);
    expect(await closed(child)).toEqual([4, null]);
    expect(got.err).toEqual(['cannot reach the orchestrator']);
  });

  it('a relayed stream nobody reads is drained, so the exit is still told', async () => {
    const relayed = new RelayedChild(1);
    relayed.output(1, 'unread\n');
    relayed.close(0, null);
    expect(await closed(relayed)).toEqual([0, null]);
  });
});
