/**
 * The bench's side of submitter.ts: submits sent from a small process of their own, each answered
 * with the time its request left (wall clock, ms since the epoch, with fractions).
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export interface Submitted {
  /** When the request was written, on the wall clock. */
  at: number;
  status: number;
  body: string;
}

export interface SubmitClient {
  post(url: string, headers: Record<string, string>, body: unknown): Promise<Submitted>;
  close(): Promise<void>;
}

export async function submitClient(): Promise<SubmitClient> {
  const child = spawn(process.execPath, [join(import.meta.dirname, 'submitter.ts')], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const answers = new Map<number, { ok: (s: Submitted) => void; failed: (err: Error) => void }>();
  let ready!: () => void;
  const isReady = new Promise<void>((r) => (ready = r));
  createInterface({ input: child.stdout! }).on('line', (line) => {
    const m = JSON.parse(line) as { ready?: true; i?: number } & Submitted;
    if (m.ready) return ready();
    answers.get(m.i!)?.ok({ at: m.at, status: m.status, body: m.body });
    answers.delete(m.i!);
  });
  const exited = new Promise((r) => child.once('exit', r));
  // A client that dies fails what it owed, so the bench stops with a reason, never hangs.
  void exited.then(() => {
    for (const a of answers.values()) a.failed(new Error('the submit client exited'));
  });
  await Promise.race([isReady, exited.then(() => Promise.reject(new Error('the submit client exited')))]);
  let next = 0;
  return {
    post(url, headers, body) {
      const i = next++;
      const done = new Promise<Submitted>((ok, failed) => answers.set(i, { ok, failed }));
      child.stdin!.write(`${JSON.stringify({ i, url, headers, body: JSON.stringify(body) })}\n`);
      return done;
    },
    async close() {
      child.stdin!.end();
      await exited;
    },
  };
}
