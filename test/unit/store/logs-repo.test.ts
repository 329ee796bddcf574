import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../../src/store/index.js';
import type { LogLine } from '../../../src/store/logs-repo.js';
import { freshStore } from '../../helpers/data-dir.js';

let store: Store;
let close: () => Promise<void>;
beforeAll(async () => {
  ({ store, close } = await freshStore());
});
afterAll(async () => close());

let counter = 0;
const uid = (p: string) => `${p}-${++counter}`;

const T0 = new Date('2025-03-01T10:00:00.000Z');

function lines(jobId: string, n: number, from = 0): LogLine[] {
  return Array.from({ length: n }, (_, i) => ({
    jobId,
    stepIdx: Math.floor((from + i) / 1000),
    stream: (from + i) % 7 === 0 ? 'stderr' : 'stdout',
    line: `line ${from + i}`,
    ts: new Date(T0.getTime() + from + i),
  }));
}

describe('LogsRepo', () => {
  it('keeps 5,000 appended lines in order, with rising ids', async () => {
    const job = uid('job');
    const input = lines(job, 5000);
    await store.logs.append(input);
    const rows = await store.logs.list(job);
    expect(rows.map((r) => r.line)).toEqual(input.map((l) => l.line));
    expect(rows.map((r) => r.stream)).toEqual(input.map((l) => l.stream));
    expect(rows.map((r) => r.step_idx)).toEqual(input.map((l) => l.stepIdx));
    expect(rows[4999]!.ts.getTime()).toBe(T0.getTime() + 4999);
    const ids = rows.map((r) => BigInt(r.id));
    for (let i = 1; i < ids.length; i++) expect(ids[i]! > ids[i - 1]!).toBe(true);
  });

  it('returns only lines after the given id, up to the limit', async () => {
    const job = uid('job');
    await store.logs.append(lines(job, 30));
    const all = await store.logs.list(job);
    const cut = Number(all[9]!.id);
    const after = await store.logs.list(job, cut);
    expect(after.map((r) => r.line)).toEqual(all.slice(10).map((r) => r.line));
    expect((await store.logs.list(job, cut, 5)).map((r) => r.line)).toEqual(
      all.slice(10, 15).map((r) => r.line),
    );
    expect(await store.logs.list(job, Number(all[29]!.id))).toEqual([]);
    expect((await store.logs.list(job, 0)).length).toBe(30);
  });

  it('follows a log as it grows, in pages', async () => {
    const job = uid('job');
    await store.logs.append(lines(job, 1200));
    const seen: string[] = [];
    let cursor: number | undefined;
    for (;;) {
      const page = await store.logs.list(job, cursor, 500);
      if (page.length === 0) break;
      seen.push(...page.map((r) => r.line));
      cursor = Number(page.at(-1)!.id);
      if (seen.length === 1000) await store.logs.append(lines(job, 300, 1200));
    }
    expect(seen).toEqual(lines(job, 1500).map((l) => l.line));
  });

  it('keeps jobs apart even when their lines interleave', async () => {
    const a = uid('job');
    const b = uid('job');
    await store.logs.append([...lines(a, 3), ...lines(b, 2), ...lines(a, 2, 3)]);
    expect((await store.logs.list(a)).map((r) => r.line)).toEqual([
      'line 0',
      'line 1',
      'line 2',
      'line 3',
      'line 4',
    ]);
    expect((await store.logs.list(b)).map((r) => r.line)).toEqual(['line 0', 'line 1']);
    expect(await store.logs.list(uid('silent'))).toEqual([]);
  });

  it('stores a line exactly as given', async () => {
    const job = uid('job');
    const odd = [
      '',
      '  leading and trailing  ',
      'tab\there',
      'ünïcødé ✓',
      'quote \' and " and \\',
      'x'.repeat(20_000),
    ];
    await store.logs.append(
      odd.map((line, i) => ({
        jobId: job,
        stepIdx: null,
        stream: 'stdout',
        line,
        ts: new Date(T0.getTime() + i),
      })),
    );
    const rows = await store.logs.list(job);
    expect(rows.map((r) => r.line)).toEqual(odd);
    expect(rows.every((r) => r.step_idx === null)).toBe(true);
  });

  it('records step start and finish once per step, in step order', async () => {
    const job = uid('job');
    await store.jobs.insertRun(
      { id: uid('run'), name: null },
      [{ id: job, name: 'j', runsOn: ['x'], spec: {} }],
      T0,
    );
    await store.logs.stepStarted(job, 1, 'test', T0);
    await store.logs.stepStarted(job, 0, 'build', T0);
    await store.logs.stepStarted(job, 0, 'build again', new Date(T0.getTime() + 1));
    await store.logs.stepFinished(job, 0, 0, false, new Date(T0.getTime() + 2));
    await store.logs.stepFinished(job, 1, null, true, new Date(T0.getTime() + 3));
    const steps = await store.logs.steps(job);
    expect(steps.map((s) => [s.idx, s.name, s.exit_code, s.timed_out])).toEqual([
      [0, 'build', 0, false],
      [1, 'test', null, true],
    ]);
  });
});
