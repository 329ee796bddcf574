/**
 * Generators for the WebSocket fuzz test: each case is a few raw frames, some random, most mutated
 * from valid agent messages, all drawn from a seeded PRNG so a failing seed replays exactly.
 */
import { frame as rawFrame, type FrameSpec } from './raw-ws.js';

export type Rand = () => number;

/** A small, fast, seedable PRNG (mulberry32); good enough to pick test inputs. */
export function mulberry32(seed: number): Rand {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

const int = (r: Rand, n: number) => Math.floor(r() * n);
const pick = <T>(r: Rand, xs: readonly T[]): T => xs[int(r, xs.length)]!;

function bytes(r: Rand, n: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = int(r, 256);
  return b;
}

const NUMBERS = [
  0,
  1,
  -1,
  1.5,
  255,
  2 ** 31 - 1,
  2 ** 31,
  -(2 ** 31) - 1,
  99_999_999_999,
  1e308,
  -1e308,
  2 ** 53 + 2,
];
const STRINGS = ['', 'x', 'a\u0000b', '\ud800', '\udc00x', 'é', '../../etc/passwd', '%00', 'x'.repeat(5000)];
const TYPES = [
  'register',
  'heartbeat',
  'job.started',
  'step.started',
  'log',
  'step.finished',
  'job.finished',
  'job.rejected',
  'register.ack',
  'nope',
];

/** Any JSON value, biased toward the edges: huge and fractional numbers, NUL, lone surrogates. */
function value(r: Rand, jobIds: string[], depth = 0): unknown {
  switch (int(r, depth > 3 ? 5 : 8)) {
    case 0:
      return pick(r, NUMBERS);
    case 1:
      return pick(r, STRINGS);
    case 2:
      return pick(r, jobIds);
    case 3:
      return pick(r, [true, false, null]);
    case 4:
      return int(r, 1000) - 10;
    case 5:
      return Array.from({ length: int(r, 4) }, () => value(r, jobIds, depth + 1));
    case 6:
      return Object.fromEntries(
        Array.from({ length: int(r, 4) }, () => [
          pick(r, ['type', 'jobId', 'idx', 'a', '__proto__']),
          value(r, jobIds, depth + 1),
        ]),
      );
    default:
      return JSON.parse('['.repeat(200) + ']'.repeat(200));
  }
}

/** A message that is valid for its type, so that mutating one field reaches deep into the handler. */
function validMessage(r: Rand, jobIds: string[]): Record<string, unknown> {
  const jobId = pick(r, jobIds);
  switch (int(r, 8)) {
    case 0:
      return { type: 'heartbeat' };
    case 1:
      return { type: 'job.started', jobId };
    case 2:
      return { type: 'step.started', jobId, idx: int(r, 3), name: 'step' };
    case 3:
      return { type: 'log', jobId, idx: int(r, 2) ? 0 : null, stream: 'stdout', lines: ['fuzz line'] };
    case 4:
      return { type: 'step.finished', jobId, idx: 0, exitCode: int(r, 3), timedOut: false, durationMs: 5 };
    case 5:
      return { type: 'job.finished', jobId, result: pick(r, ['succeeded', 'failed']), exitCode: int(r, 3) };
    case 6:
      return { type: 'job.rejected', jobId, reason: 'busy' };
    default:
      return { type: 'register', protocol: 1, agentId: 'fuzz-x', token: 'kici_wrong', labels: ['fuzz'] };
  }
}

function message(r: Rand, jobIds: string[]): string {
  const m = validMessage(r, jobIds);
  const mutations = int(r, 3);
  for (let i = 0; i < mutations; i++) {
    const keys = Object.keys(m);
    const op = int(r, 4);
    if (op === 0) m[pick(r, keys)] = value(r, jobIds);
    else if (op === 1) delete m[pick(r, keys)];
    else if (op === 2) m.type = pick(r, TYPES);
    else m[pick(r, ['extra', 'idx', 'exitCode', 'lines', 'jobId'])] = value(r, jobIds);
  }
  let text = JSON.stringify(m);
  // Sometimes break the JSON itself.
  if (r() < 0.15) {
    const at = int(r, text.length + 1);
    text = pick(r, [
      text.slice(0, at),
      text.slice(0, at) + pick(r, ['"', '}', '\\', '\u0000', ',']) + text.slice(at),
    ]);
  }
  return text;
}

/** Change a few bytes, or cut the frame short, or say a different length than was sent. */
function mutateFrame(r: Rand, f: Buffer): Buffer {
  const out = Buffer.from(f);
  switch (int(r, 4)) {
    case 0:
      for (let i = int(r, 3) + 1; i > 0; i--) {
        const at = int(r, out.length);
        out[at] = out[at]! ^ (1 << int(r, 8));
      }
      return out;
    case 1:
      return out.subarray(0, int(r, out.length));
    case 2:
      out[0] = (out[0]! & 0x80) | int(r, 128);
      return out;
    default:
      out[1] = (out[1]! & 0x80) | int(r, 126);
      return out;
  }
}

/** One case: up to six frames for a single connection. */
export function fuzzItems(r: Rand, jobIds: string[]): Buffer[] {
  // The masking key comes from the seed too, so a mutated frame replays byte for byte.
  const frame = (spec: FrameSpec) => rawFrame({ maskKey: bytes(r, 4), ...spec });
  const items: Buffer[] = [];
  for (let i = int(r, 6) + 1; i > 0; i--) {
    const kind = int(r, 10);
    if (kind < 4) items.push(frame({ payload: message(r, jobIds) }));
    else if (kind < 6) items.push(mutateFrame(r, frame({ payload: message(r, jobIds) })));
    else if (kind === 6) items.push(bytes(r, int(r, 64)));
    else if (kind === 7)
      // Control frames with random payloads, including close frames with codes nobody may send.
      items.push(frame({ opcode: pick(r, [0x8, 0x9, 0xa]), payload: bytes(r, int(r, 20)) }));
    else if (kind === 8) {
      // A message split in fragments, sometimes never finished.
      const text = Buffer.from(message(r, jobIds));
      const cut = int(r, text.length);
      items.push(frame({ payload: text.subarray(0, cut), fin: false }));
      if (r() < 0.7) items.push(frame({ payload: text.subarray(cut), opcode: 0 }));
    } else if (r() < 0.2)
      // Large: a header that claims far more than the limits, or a real frame over the pre-auth cap.
      items.push(
        r() < 0.5
          ? frame({ claimedLength: pick(r, [2 ** 20, 2 ** 23, 2 ** 40]) })
          : frame({ payload: JSON.stringify({ type: 'heartbeat', pad: 'x'.repeat(20_000) }) }),
      );
    else items.push(frame({ payload: bytes(r, int(r, 40)), opcode: pick(r, [1, 2]), mask: r() < 0.9 }));
  }
  return items;
}
