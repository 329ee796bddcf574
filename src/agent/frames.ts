import type { AgentMessage } from '../protocol/messages.js';

/**
 * No frame the agent sends may exceed this (the orchestrator refuses larger ones). JSON escapes a
 * control character as six bytes, so size is measured on the serialized form, never on the text.
 */
export const MAX_FRAME_BYTES = 1024 * 1024;

/**
 * The frames that carry `msg`. The job runner already cuts log batches to fit; this guard halves
 * any log batch that still does not, and drops (reporting it) any other message that is too large.
 */
export function encodeFrames(msg: AgentMessage, onDrop: (what: string) => void): string[] {
  const data = JSON.stringify(msg);
  if (Buffer.byteLength(data) <= MAX_FRAME_BYTES) return [data];
  if (msg.type === 'log' && msg.lines.length > 1) {
    const mid = Math.ceil(msg.lines.length / 2);
    return [
      ...encodeFrames({ ...msg, lines: msg.lines.slice(0, mid) }, onDrop),
      ...encodeFrames({ ...msg, lines: msg.lines.slice(mid) }, onDrop),
    ];
  }
  onDrop(`a ${msg.type} message too large for one frame`);
  return [];
}

/** Resolves once `done()` holds, or after `ms`, whichever comes first. */
export function waitUntil(done: () => boolean, ms: number): Promise<void> {
  const until = performance.now() + ms;
  return new Promise((resolve) => {
    const check = () => (done() || performance.now() >= until ? resolve() : setTimeout(check, 20));
    check();
  });
}
