import { gunzipSync, gzipSync } from 'node:zlib';

/**
 * A job's output is stored as chunks: one row holds up to CHUNK_MAX_BYTES of text (or
 * CHUNK_MAX_LINES lines) of one job, as JSON, gzip-compressed once it is large enough to gain.
 * Each line keeps its stream, step and timestamp (in ms from the chunk's first line).
 *
 * Line ids stay numbers that only grow within a job, so `after=<id>` paging still works: a
 * chunk's id comes from the sequence the per-line rows used, and its lines are numbered
 * `chunkId * LINE_ID_SCALE + index`. Every chunk is written after every per-line row of an
 * older version, so old rows' ids sort before all chunk lines.
 */
export const CHUNK_MAX_BYTES = 64 * 1024;
export const LINE_ID_SCALE = 65_536;
export const CHUNK_MAX_LINES = LINE_ID_SCALE - 1;
/** Below this, gzip's header and tables cost more than they save. */
const COMPRESS_FROM_BYTES = 512;
const GZIP_MAGIC = 0x1f;

export interface ChunkLine {
  stepIdx: number | null;
  stream: string;
  line: string;
  ts: Date;
}

interface Payload {
  /** The first line's time, ms since the epoch. */
  t: number;
  /** [ms after t, stream, step, text] per line. */
  l: [number, string, number | null, string][];
}

/** Step indexes keep the range of the integer column they had as per-line rows. */
function checkStep(step: number | null): void {
  if (step !== null && !(Number.isInteger(step) && step >= -(2 ** 31) && step < 2 ** 31))
    throw new RangeError(`step index ${step} is out of range for an integer`);
}

export function encodeChunk(lines: readonly ChunkLine[]): Buffer {
  for (const l of lines) checkStep(l.stepIdx);
  const t = lines[0]?.ts.getTime() ?? 0;
  const payload: Payload = { t, l: lines.map((x) => [x.ts.getTime() - t, x.stream, x.stepIdx, x.line]) };
  const json = Buffer.from(JSON.stringify(payload), 'utf8');
  return json.length >= COMPRESS_FROM_BYTES ? gzipSync(json, { level: 6 }) : json;
}

export function decodeChunk(data: Uint8Array): ChunkLine[] {
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const json = buf[0] === GZIP_MAGIC ? gunzipSync(buf) : buf;
  const p = JSON.parse(json.toString('utf8')) as Payload;
  return p.l.map(([dt, stream, stepIdx, line]) => ({ stepIdx, stream, line, ts: new Date(p.t + dt) }));
}

/** Split one job's lines (in order) into chunks within the byte and line limits. */
export function splitIntoChunks<T extends { line: string; stream: string }>(lines: readonly T[]): T[][] {
  const out: T[][] = [];
  let cur: T[] = [];
  let bytes = 0;
  for (const l of lines) {
    // UTF-16 length is a cheap upper bound of the JSON text's size for most output.
    const size = l.line.length + l.stream.length + 16;
    if (cur.length && (bytes + size > CHUNK_MAX_BYTES || cur.length >= CHUNK_MAX_LINES)) {
      out.push(cur);
      cur = [];
      bytes = 0;
    }
    cur.push(l);
    bytes += size;
  }
  if (cur.length) out.push(cur);
  return out;
}
