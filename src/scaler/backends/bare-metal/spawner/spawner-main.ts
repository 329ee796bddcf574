/**
 * The agent spawner: a small, long-lived process that starts bare-metal agents for the
 * orchestrator. Forking copies the parent's page tables, so a child of the orchestrator (hundreds
 * of MiB once its store is open) costs several times what a child of this process does, on every
 * cold start. Of ours it loads only the launch itself (agent-child.ts, which the orchestrator's own
 * fallback uses too): its start and size stay those of a bare Node.
 *
 * Protocol (one JSON object per line): requests on stdin `{n, file, args, env, token, undo?}`, and
 * `{settled: n}` once a provisional start no longer needs undoing here; on stdout `{ready}` once,
 * then per request `{n, pid}` or `{n, err}`, its output `{n, o: 1|2, d}` and at the end `{n, c:
 * [code, signal]}` (after its output). It exits when stdin ends, leaving its agents running, as the
 * orchestrator's own death would: they are re-adopted or reaped by the next one through their
 * records. A start asked with `undo` is provisional (its record is still being written): should
 * stdin end before it is settled, no record names it, so its group is killed here and the paths
 * in `undo` (its home, its uid claim) are removed once it has exited. It is settled by the
 * orchestrator (the record is written, or the orchestrator undid the start itself), or here when
 * it did not start or has exited (the orchestrator hears of both and undoes the rest): a uid claim
 * outlives neither its agent's record nor its agent's life here, so that a later agent's is never
 * removed in its place, nor a recycled pid's group killed.
 */
import { rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { spawnDirect, type AgentLaunch } from './agent-child.js';

type Request = AgentLaunch & { n: number; undo?: string[] };

/**
 * Provisional starts not yet settled, from their request on: the started agent (its pid and exit) once
 * known, undefined when it did not start, and what to remove after it.
 */
const provisional = new Map<
  number,
  { started: Promise<{ pid: number; exited: Promise<void> } | undefined>; undo: string[] }
>();

function send(msg: object): void {
  process.stdout.write(`${JSON.stringify(msg)}\n`);
}

/** The same launch as the orchestrator's own (token on its descriptor), its output and exit relayed. */
function start(r: Request): void {
  const { n, undo, ...launch } = r;
  const starting = spawnDirect(launch);
  if (undo)
    provisional.set(n, {
      undo,
      started: starting.then(
        (child) => ({
          pid: child.pid,
          exited: new Promise<void>((ok) =>
            child.onClose(() => {
              provisional.delete(n);
              ok();
            }),
          ),
        }),
        () => {
          provisional.delete(n);
          return undefined;
        },
      ),
    });
  starting.then(
    (child) => {
      send({ n, pid: child.pid });
      for (const [o, s] of [
        [1, child.stdout],
        [2, child.stderr],
      ] as const) {
        s.setEncoding('utf8');
        s.on('data', (d: string) => send({ n, o, d }));
      }
      // 'close' follows the end of both output streams, so the client has every line before the exit.
      child.onClose((code, signal) => send({ n, c: [code, signal] }));
    },
    (e: NodeJS.ErrnoException) => send({ n, err: { code: e.code, message: e.message } }),
  );
}

let ending: Promise<void> | undefined;
/** The orchestrator is gone or closed us: undo what may have no record, then exit. Once. */
function end(): void {
  ending ??= undoProvisional().finally(() => process.exit(0));
}

// Terminal signals meant for the orchestrator's group do not reach this one (it runs in its own);
// the end of stdin, or of the orchestrator's reading end, is its only way out.
process.stdout.on('error', end);
/**
 * The orchestrator is gone (or closed us) with starts whose records may not exist: nothing would
 * find those agents again, so they go, with their home and uid claim. SIGKILL: an agent this young
 * has nothing to finish.
 */
async function undoProvisional(): Promise<void> {
  await Promise.all(
    [...provisional.values()].map(async (p) => {
      const agent = await p.started;
      if (agent) {
        try {
          process.kill(-agent.pid, 'SIGKILL');
        } catch {
          // the group is gone already
        }
        // Its output pipes close with it, unless something outside its group holds them: the
        // paths go after a few seconds regardless.
        await Promise.race([agent.exited, new Promise((ok) => setTimeout(ok, 5_000))]);
      }
      for (const path of p.undo) rmSync(path, { recursive: true, force: true });
    }),
  );
}

const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  let r: Request | { settled: number };
  try {
    r = JSON.parse(line) as Request | { settled: number };
  } catch {
    return; // not a request of ours: without its number there is no one to answer
  }
  if ('settled' in r) {
    provisional.delete(r.settled);
    return;
  }
  try {
    start(r);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    send({ n: r.n, err: { code: err.code, message: err.message } });
  }
});
lines.on('close', end);
send({ ready: true });
