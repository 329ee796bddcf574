/** Follow an agent container's output: demultiplexed, split into lines, with a bounded tail. */
import { PassThrough } from 'node:stream';
import type Docker from 'dockerode';
import { onLines } from '../../../util/lines.js';
import type { LineSource } from '../log-capture.js';

export const TAIL_LINES = 50;

export interface FollowedLogs {
  tail(maxLines?: number): string[];
  close(): void;
}

export class LineTail implements LineSource {
  private readonly lines: string[] = [];
  private readonly listeners = new Set<(line: string | null) => void>();
  private ended = false;
  push(line: string): void {
    this.lines.push(line);
    if (this.lines.length > TAIL_LINES) this.lines.shift();
    for (const fn of this.listeners) fn(line);
  }
  tail(n = TAIL_LINES): string[] {
    return this.lines.slice(-n);
  }
  kept(): readonly string[] {
    return this.lines;
  }
  subscribe(fn: (line: string | null) => void): () => void {
    if (this.ended) {
      fn(null);
      return () => undefined;
    }
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }
  /** The agent is gone: every follower of its lines stops. */
  end(): void {
    this.ended = true;
    for (const fn of [...this.listeners]) fn(null);
    this.listeners.clear();
  }
}

/**
 * Attach to the container's log stream (stdout and stderr arrive multiplexed on one stream when
 * the container has no TTY) and hand on each line with the stream it came from.
 */
export async function followLogs(
  docker: Docker,
  containerId: string,
  onLine: (stream: 'stdout' | 'stderr', line: string) => void,
  tail: LineTail = new LineTail(),
): Promise<FollowedLogs> {
  const raw = (await docker.getContainer(containerId).logs({
    follow: true,
    stdout: true,
    stderr: true,
  })) as unknown as NodeJS.ReadableStream & { destroy(): void };
  const out = new PassThrough();
  const err = new PassThrough();
  docker.modem.demuxStream(raw, out, err);
  const end = () => {
    out.end();
    err.end();
  };
  raw.on('end', end);
  raw.on('close', end);
  raw.on('error', end);
  for (const [name, s] of [
    ['stdout', out],
    ['stderr', err],
  ] as const) {
    onLines(s, (line) => {
      tail.push(line);
      onLine(name, line);
    });
  }
  return {
    tail: (n) => tail.tail(n),
    close: () => raw.destroy(),
  };
}

/** The last lines of a container's output, fetched once (for a start that failed before we followed). */
export async function fetchTail(docker: Docker, containerId: string, n = TAIL_LINES): Promise<string[]> {
  const buf = (await docker.getContainer(containerId).logs({
    follow: false,
    stdout: true,
    stderr: true,
    tail: n,
  })) as unknown as Buffer;
  return demuxBuffer(buf).slice(-n);
}

/** Decode the engine's 8-byte-framed log stream held in one buffer; plain text passes through. */
export function demuxBuffer(buf: Buffer): string[] {
  let text = '';
  let i = 0;
  const framed = buf.length >= 8 && buf[0]! <= 2 && buf[1] === 0 && buf[2] === 0 && buf[3] === 0;
  if (!framed) text = buf.toString('utf8');
  else {
    while (i + 8 <= buf.length) {
      const len = buf.readUInt32BE(i + 4);
      text += buf.subarray(i + 8, i + 8 + len).toString('utf8');
      i += 8 + len;
    }
  }
  return text.split('\n').filter((l) => l.length > 0);
}
