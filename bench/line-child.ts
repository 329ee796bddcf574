/**
 * A bench helper in a small process of its own, spoken to in JSON lines: it says `{ready}` once,
 * then answers each request `{i, ...}` with a line carrying the same `i` (`lineChild` is the
 * bench's side, `serveLines` the child's). Used for what must not run
 * inside the bench's own process: the raw agent start (raw-starter.ts), whose fork would copy the
 * bench's heap, and the submits (submitter.ts), whose work would share the orchestrator's loop.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export interface LineChild<A> {
  /** The child's `{ready, ...}` line: what it said of itself as it started. */
  readonly ready: Record<string, unknown>;
  /** Sends the request (numbered here) and resolves with the child's answer to it. */
  ask(request: object): Promise<A>;
  /** Ends the child's input and waits for it to exit. */
  close(): Promise<void>;
}

export async function lineChild<A>(file: string, name: string): Promise<LineChild<A>> {
  const child = spawn(process.execPath, [join(import.meta.dirname, file)], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const answers = new Map<number, { ok: (a: A) => void; failed: (err: Error) => void }>();
  let ready!: (m: Record<string, unknown>) => void;
  const isReady = new Promise<Record<string, unknown>>((r) => (ready = r));
  createInterface({ input: child.stdout! }).on('line', (line) => {
    const m = JSON.parse(line) as { ready?: true; i: number };
    if (m.ready) return ready(m);
    answers.get(m.i)?.ok(m as A);
    answers.delete(m.i);
  });
  const exited = new Promise((r) => child.once('exit', r));
  // A child that dies fails what it owed, so the bench stops with a reason, never hangs.
  void exited.then(() => {
    for (const a of answers.values()) a.failed(new Error(`${name} exited mid-request`));
  });
  const said = await Promise.race([isReady, exited.then(() => Promise.reject(new Error(`${name} exited`)))]);
  let next = 0;
  return {
    ready: said,
    ask(request) {
      const i = next++;
      const answer = new Promise<A>((ok, failed) => answers.set(i, { ok, failed }));
      child.stdin!.write(`${JSON.stringify({ ...request, i })}\n`);
      return answer;
    },
    async close() {
      child.stdin!.end();
      await exited;
    },
  };
}

/**
 * The child's side: each request read from stdin is answered by `answer`, one at a time in the
 * order asked, its answer written with the request's `i`; `atEnd` runs once stdin has ended and
 * the last answer is out. Says `{ready, ...said}` first.
 */
export function serveLines<R extends { i: number }>(
  answer: (r: R) => Promise<object>,
  atEnd: () => void,
  said: Record<string, unknown> = {},
): void {
  let queue = Promise.resolve();
  createInterface({ input: process.stdin })
    .on('line', (line) => {
      const r = JSON.parse(line) as R;
      queue = queue.then(async () => {
        process.stdout.write(`${JSON.stringify({ i: r.i, ...(await answer(r)) })}\n`);
      });
    })
    .on('close', () => {
      void queue.then(atEnd);
    });
  process.stdout.write(`${JSON.stringify({ ready: true, ...said })}\n`);
}
