/**
 * The bench's side of submitter.ts: submits sent from a small process of their own, each answered
 * with the time its request left (wall clock, ms since the epoch, with fractions).
 */
import { lineChild } from './line-child.ts';

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
  const child = await lineChild<Submitted>('submitter.ts', 'the submit client');
  return {
    post: (url, headers, body) => child.ask({ url, headers, body: JSON.stringify(body) }),
    close: () => child.close(),
  };
}
