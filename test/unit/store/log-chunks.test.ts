/**
 * Compact log storage: whatever a job prints (stdout and stderr interleaved, long lines, NULs,
 * bursts), reading its stored chunks back gives every line in order with its stream, step and
 * timestamp, and so does following it page by page while it is being written (what
 * `job logs --follow` does). Per-line rows written by older versions still read first.
 */
import fc from 'fast-check';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../../src/store/index.js';
import { CHUNK_MAX_BYTES, decodeChunk, encodeChunk, splitIntoChunks } from '../../../src/store/log-chunks.js';
import { storableLine, type LogLine } from '../../../src/store/logs-repo.js';
import { freshStore } from '../../helpers/data-dir.js';

let store: Store;
let close: () => Promise<void>;
beforeAll(async () => {
  ({ store, close } = await freshStore());
});
afterAll(async () => close());

let jobs = 0;
const T0 = Date.parse('2026-01-01T00:00:00Z');

const textArb = fc.oneof(
  { weight: 6, arbitrary: fc.string({ maxLength: 80 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  { weight: 1, arbitrary: fc.constantFrom('\0', 'a\0b\0', '\ud800 lone', '') },
  // Long lines: some over a whole chunk.
  { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 2 * CHUNK_MAX_BYTES }).map((n) => 'x'.repeat(n)) },
);
const lineArb = fc.record({
  stream: fc.constantFrom('stdout', 'stderr'),
  step: fc.option(fc.integer({ min: 0, max: 5 }), { nil: null }),
  text: textArb,
  dt: fc.integer({ min: 0, max: 2_000 }),
});
/** Bursts: the batches the sink writes, of any size. */
const burstsArb = fc.array(fc.array(lineArb, { minLength: 1, maxLength: 60 }), {
  minLength: 1,
  maxLength: 8,
});

describe('log chunks', () => {
  it('random interleavings read back identically, whole and followed page by page while written', async () => {
    await fc.assert(
      fc.asyncProperty(burstsArb, fc.integer({ min: 1, max: 50 }), async (bursts, page) => {
        const jobId = `j-chunk${++jobs}`;
        let t = T0;
        const written: LogLine[] = [];
        const followed: { id: number; line: string; stream: string; step: number | null; ts: number }[] = [];
        let cursor: number | undefined;
        const follow = async () => {
          for (;;) {
            const rows = await store.logs.list(jobId, cursor, page);
            for (const r of rows)
              followed.push({
                id: Number(r.id),
                line: r.line,
                stream: r.stream,
                step: r.step_idx,
                ts: r.ts.getTime(),
              });
            if (rows.length) cursor = Number(rows[rows.length - 1]!.id);
            if (rows.length < page) return;
          }
        };
        for (const burst of bursts) {
          const batch = burst.map((l) => ({
            jobId,
            stepIdx: l.step,
            stream: l.stream,
            line: l.text,
            ts: new Date((t += l.dt)),
          }));
          written.push(...batch);
          await store.logs.append(batch);
          await follow();
        }
        const want = written.map((l) => ({
          line: storableLine(l.line),
          stream: l.stream,
          step: l.stepIdx,
          ts: l.ts.getTime(),
        }));
        const whole = (await store.logs.list(jobId)).map((r) => ({
          line: r.line,
          stream: r.stream,
          step: r.step_idx,
          ts: r.ts.getTime(),
        }));
        expect(whole).toEqual(want);
        expect(followed.map(({ id: _id, ...rest }) => rest)).toEqual(want);
        for (let i = 1; i < followed.length; i++)
          expect(followed[i]!.id).toBeGreaterThan(followed[i - 1]!.id);
      }),
      { numRuns: 40 },
    );
  });

  it('a chunk keeps its lines within the size limit unless one line alone is larger', () => {
    fc.assert(
      fc.property(fc.array(textArb, { maxLength: 200 }), (texts) => {
        const lines = texts.map((line) => ({ line, stream: 'stdout' }));
        const chunks = splitIntoChunks(lines);
        expect(chunks.flat()).toEqual(lines);
        for (const c of chunks)
          if (c.length > 1)
            expect(c.reduce((n, l) => n + l.line.length + 22, 0)).toBeLessThanOrEqual(CHUNK_MAX_BYTES);
      }),
    );
  });

  it('small chunks are stored plain, large ones gzip-compressed, both decode', () => {
    const line = (text: string) => ({ stepIdx: 1, stream: 'stdout', line: text, ts: new Date(T0) });
    const small = encodeChunk([line('hi')]);
    expect(small[0]).toBe('{'.charCodeAt(0));
    const big = encodeChunk(Array.from({ length: 500 }, (_, i) => line(`compiling module ${i % 10}`)));
    expect(big[0]).toBe(0x1f);
    expect(big.length).toBeLessThan(2_000);
    expect(decodeChunk(big)).toHaveLength(500);
    expect(decodeChunk(small)).toEqual([line('hi')]);
  });

  it('per-line rows of an older version read first, and paging crosses into the chunks', async () => {
    const jobId = `j-chunk${++jobs}`;
    for (let i = 0; i < 5; i++)
      await sql`insert into job_logs (job_id, step_idx, stream, line, ts)
        values (${jobId}, 0, 'stdout', ${`old ${i}`}, ${new Date(T0 + i).toISOString()}::timestamptz)`.execute(
        store.db,
      );
    await store.logs.append(
      Array.from({ length: 5 }, (_, i) => ({
        jobId,
        stepIdx: 1,
        stream: 'stderr',
        line: `new ${i}`,
        ts: new Date(T0 + 10 + i),
      })),
    );
    const all = await store.logs.list(jobId);
    expect(all.map((r) => r.line)).toEqual(
      [0, 1, 2, 3, 4].map((i) => `old ${i}`).concat([0, 1, 2, 3, 4].map((i) => `new ${i}`)),
    );
    const seen: string[] = [];
    let cursor: number | undefined;
    for (;;) {
      const rows = await store.logs.list(jobId, cursor, 3);
      seen.push(...rows.map((r) => r.line));
      if (rows.length < 3) break;
      cursor = Number(rows[rows.length - 1]!.id);
    }
    expect(seen).toEqual(all.map((r) => r.line));
  });
});
