/**
 * The LogCapture a backend hands out for one agent: a view over the lines it keeps, plus the lines
 * that arrive while someone iterates. Shared by every backend that captures output.
 */
import type { LogCapture } from '../types.js';

export const LOG_CAPTURE_TAIL_LINES = 50;

/** Where a capture reads from: the kept lines, and (optionally) a feed of new ones. */
export interface LineSource {
  kept(): readonly string[];
  /**
   * Calls `fn` with each new line, and with null once no more will come (the agent is gone); the
   * returned function stops it. Absent: no live lines.
   */
  subscribe?(fn: (line: string | null) => void): () => void;
}

export function logCaptureOf(source: LineSource): LogCapture {
  const stops = new Set<() => void>();
  let closed = false;
  return {
    tail(maxLines = LOG_CAPTURE_TAIL_LINES) {
      const n = Math.max(0, Math.min(maxLines, LOG_CAPTURE_TAIL_LINES));
      return n === 0 ? '' : source.kept().slice(-n).join('\n');
    },
    close() {
      closed = true;
      for (const stop of [...stops]) stop();
    },
    lines() {
      return follow(source, stops, () => closed);
    },
  };
}

async function* follow(
  source: LineSource,
  stops: Set<() => void>,
  isClosed: () => boolean,
): AsyncGenerator<string> {
  if (isClosed()) return;
  const queue: string[] = [...source.kept()];
  let wake: (() => void) | undefined;
  let ended = false;
  const stop = () => {
    ended = true;
    wake?.();
  };
  const unsubscribe = source.subscribe?.((line) => {
    if (line === null) return stop();
    queue.push(line);
    wake?.();
  });
  stops.add(stop);
  try {
    for (;;) {
      while (queue.length > 0) yield queue.shift()!;
      // Without a feed the kept lines are all there is.
      if (ended || !unsubscribe) return;
      await new Promise<void>((resolve) => (wake = resolve));
      wake = undefined;
    }
  } finally {
    stops.delete(stop);
    unsubscribe?.();
  }
}
