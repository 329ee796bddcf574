import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Kysely } from 'kysely';
import { pino } from 'pino';
import { jobLogMaxBytesFromEnv } from '../../../src/dispatch/log-cap.js';
import { LogSink } from '../../../src/dispatch/log-sink.js';
import type { Store } from '../../../src/store/index.js';
import type { LogLine } from '../../../src/store/logs-repo.js';
import { UserError } from '../../../src/util/errors.js';
import { freshStore } from '../../helpers/data-dir.js';
import { databaseText } from '../../helpers/db-text.js';

let store: Store;
let close: () => Promise<void>;
beforeAll(async () => {
  ({ store, close } = await freshStore());
});
afterAll(async () => close());

const log = pino({ level: 'silent' });
let n = 0;
async function newJob(): Promise<string> {
  const id = `j-sink-${++n}`;
  await store.jobs.insertRun(
    { id: `r-sink-${n}`, name: null },
    [{ id, name: 'x', runsOn: ['a'], spec: {} }],
    new Date(),
  );
  return id;
}
const line = (jobId: string, text: string, stepIdx: number | null = 0): LogLine => ({
  jobId,
  stepIdx,
  stream: 'stdout',
  line: text,
  ts: new Date(),
});
const stored = async (jobId: string) => (await store.logs.list(jobId)).map((l) => l.line);

describe('LogSink: one bad line never costs another job its output', () => {
  it('a row the database refuses fails alone; the rest of the batch is stored', async () => {
    const good = await newJob();
    const bad = await newJob();
    const sink = new LogSink(store, log, 10_000);
    sink.push([line(good, 'g1'), line(bad, 'b1'), line(bad, 'out of int4 range', 2 ** 40), line(good, 'g2')]);
    sink.push([line(bad, 'b2'), line(good, 'g3')]);
    await sink.flush();
    expect(await stored(good)).toEqual(['g1', 'g2', 'g3']);
    expect(await stored(bad)).toEqual(['b1', 'b2']);
  });

  it('NUL and lone surrogates are stored as U+FFFD', async () => {
    const job = await newJob();
    const sink = new LogSink(store, log, 10_000);
    sink.push([line(job, 'a\u0000b'), line(job, 'c\ud800d'), line(job, 'ok \ud83d\ude00')]);
    await sink.flush();
    expect(await stored(job)).toEqual(['a\uFFFDb', 'c\uFFFDd', 'ok \ud83d\ude00']);
  });
});

describe('LogSink: the per-job cap keeps head and tail', () => {
  it('stores at most the cap, first and last lines, and a line about the gap', async () => {
    const job = await newJob();
    const other = await newJob();
    const cap = 4096;
    const sink = new LogSink(store, log, 10_000, { maxBytes: cap });
    for (let i = 1; i <= 2000; i++) sink.push([line(job, `line ${i}`)]);
    sink.push([line(other, 'untouched')]);
    sink.jobEnded(job);
    await sink.flush();
    const lines = await stored(job);
    const bytes = lines.reduce((s, l) => s + Buffer.byteLength(l) + 1, 0);
    expect(bytes).toBeLessThanOrEqual(cap + 300);
    expect(lines[0]).toBe('line 1');
    expect(lines.at(-1)).toBe('line 2000');
    const marker = lines.find((l) => l.startsWith('log truncated:'));
    expect(marker).toMatch(/^log truncated: \d+ lines \(\d+ bytes\) were dropped here/);
    expect((await store.jobs.get(job))?.log_truncated).toBe(true);
    expect(await stored(other)).toEqual(['untouched']);
    expect((await store.jobs.get(other))?.log_truncated).toBe(false);
  });

  it('KICI_JOB_LOG_MAX_BYTES must be a whole number of at least 1024', () => {
    expect(jobLogMaxBytesFromEnv({})).toBe(32 * 1024 * 1024);
    expect(jobLogMaxBytesFromEnv({ KICI_JOB_LOG_MAX_BYTES: '65536' })).toBe(65536);
    for (const bad of ['12', '1e6', '-5', 'lots', '99999999999999999999'])
      expect(() => jobLogMaxBytesFromEnv({ KICI_JOB_LOG_MAX_BYTES: bad })).toThrow(UserError);
  });
});

describe('LogSink: secrets', () => {
  it("a protected job's values are masked before the store sees its lines; other jobs are untouched", async () => {
    const job = await newJob();
    const other = await newJob();
    const sink = new LogSink(store, log, 5);
    sink.protect(job, ['s3cret-value', '']);
    sink.push([line(job, 'key=s3cret-value!'), line(other, 'key=s3cret-value!')]);
    await sink.flush();
    expect(await stored(job)).toEqual(['key=***!']);
    expect(await stored(other)).toEqual(['key=s3cret-value!']);
    // Read from the tables themselves, not through the reader that serves the API.
    const text = await databaseText(store.db as unknown as Kysely<unknown>);
    expect(text).toContain('key=***!');
    expect(text.split('s3cret-value').length - 1).toBe(1); // the other job's line only
  });
});

describe('LogSink: writes held while the data dir is nearly full', () => {
  it('writes nothing while held, everything once released, and names what it had to drop', async () => {
    const job = await newJob();
    // Past the bound in memory (10 bytes here), lines are dropped and counted.
    const sink = new LogSink(store, log, 10, { heldMaxBytes: 10 });
    let held = true;
    sink.holdWritesWhile(() => held);
    const big = 'x'.repeat(12);
    sink.push([line(job, 'first'), line(job, big), line(job, big), line(job, 'last')]);
    await sink.flush();
    expect(await stored(job)).toEqual([]);
    held = false;
    await sink.flush();
    const lines = await stored(job);
    expect(lines[0]).toBe('first');
    expect(lines).toContain('2 lines of output were dropped while the data dir was nearly full');
    expect(lines.filter((l) => l === big)).toHaveLength(1);
  });
});

describe('LogSink: a stop while writes are held', () => {
  it('drops the held output, counts it per job in one stored line, and returns the counts', async () => {
    const [a, b] = [await newJob(), await newJob()];
    const sink = new LogSink(store, log, 10, { heldMaxBytes: 20 });
    sink.holdWritesWhile(() => true);
    const big = 'y'.repeat(15);
    // Two of a's lines are held in memory; the rest (a's last two, b's one) are past the bound.
    sink.push([line(a, big), line(a, big), line(a, big), line(a, big), line(b, 'only')]);
    await sink.flush();
    const dropped = await sink.close();
    expect(Object.fromEntries(dropped)).toEqual({ [a]: 4, [b]: 1 });
    const note = (n: number) =>
      `${n} lines of output were not stored: the orchestrator stopped while the data dir was nearly full`;
    expect(await stored(a)).toEqual([note(4)]);
    expect(await stored(b)).toEqual([note(1)]);
  });

  it('writes everything when nothing is held', async () => {
    const job = await newJob();
    const sink = new LogSink(store, log, 10_000);
    sink.push([line(job, 'one'), line(job, 'two')]);
    expect((await sink.close()).size).toBe(0);
    expect(await stored(job)).toEqual(['one', 'two']);
  });
});

describe('LogSink: the disk goes low while a backlog is being written', () => {
  /** The real store, with a hook run before each batch append reaches it. */
  const hooked = (before: () => void): Store =>
    ({
      ...store,
      logs: Object.assign(Object.create(store.logs) as Store['logs'], {
        append: (lines: LogLine[]) => {
          before();
          return store.logs.append(lines);
        },
      }),
    }) as Store;
  const big = (tag: string) => `${tag}-${'z'.repeat(600 * 1024)}`;

  it('keeps the unwritten slices in memory, in their place, until writes resume', async () => {
    const job = await newJob();
    let held = false;
    let appends = 0;
    // The watcher finds the disk low while the first slice is being stored.
    const sink = new LogSink(
      hooked(() => void (appends++ === 0 && (held = true))),
      log,
      10_000,
    );
    sink.holdWritesWhile(() => held);
    sink.push([line(job, big('a')), line(job, big('b')), line(job, big('c'))]);
    await sink.flush();
    expect((await stored(job)).map((l) => l.slice(0, 1))).toEqual(['a']);
    sink.push([line(job, 'd')]);
    held = false;
    await sink.flush();
    expect((await stored(job)).map((l) => l.slice(0, 1))).toEqual(['a', 'b', 'c', 'd']);
  });

  it('keeps a slice the store refused once writes are held, instead of giving it up line by line', async () => {
    const job = await newJob();
    let held = false;
    let refuse = true;
    const sink = new LogSink(
      hooked(() => {
        if (!refuse) return;
        refuse = false;
        held = true; // the space ran out under this write; the watcher sees it now
        throw new Error('could not extend file: No space left on device');
      }),
      log,
      10_000,
    );
    sink.holdWritesWhile(() => held);
    sink.push([line(job, 'one'), line(job, 'two')]);
    await sink.flush();
    expect(await stored(job)).toEqual([]);
    held = false;
    await sink.flush();
    expect(await stored(job)).toEqual(['one', 'two']);
  });
});
