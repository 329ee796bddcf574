/**
 * Hot path: the group commit of per-job writes, on the real PGlite store. Failures are injected
 * with a Kysely plugin that throws before a statement reaches the database.
 */
import fc from 'fast-check';
import type { Kysely, KyselyPlugin } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GroupCommit } from '../../../src/store/group-commit.js';
import type { Database, Store } from '../../../src/store/index.js';
import { freshStore } from '../../helpers/data-dir.js';

let store: Store;
let close: () => Promise<void>;
beforeAll(async () => {
  ({ store, close } = await freshStore());
}, 60_000);
afterAll(async () => close());

let n = 0;
/** Jobs in state 'dispatched' on agent `ag` (the state the hot path starts from). */
async function dispatchedJobs(count: number, prefix = 'gc'): Promise<string[]> {
  const run = `r-${prefix}-${++n}`;
  const ids = Array.from({ length: count }, (_, i) => `j-${prefix}-${n}-${i}`);
  await store.jobs.insertRun(
    { id: run, name: null },
    ids.map((id) => ({ id, name: id, runsOn: ['linux'], spec: { steps: [] } })),
    new Date(),
  );
  for (const id of ids) await store.jobs.claimSpec(id, 'ag', new Date());
  return ids;
}

/** A view of the store that fails every statement while `down.on` is set. */
function breakable(db: Kysely<Database>) {
  const down = { on: false };
  const plugin: KyselyPlugin = {
    transformQuery(args) {
      if (down.on) throw new Error('Connection terminated unexpectedly');
      return args.node;
    },
    transformResult: async (args) => args.result,
  };
  return { db: db.withPlugin(plugin), down };
}

const T = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s));

// Both ways a batch is written: the pipeline of small statements (the embedded database's way)
// and the single statement of CTEs (PostgreSQL's), each on the same real store.
describe.each([
  ['pipelined', undefined],
  ['as one statement', false],
] as const)('GroupCommit (%s)', (_, pipeline) => {
  const mk = (db: Kysely<Database>, repos: Pick<Store, 'jobs' | 'logs'>, tickMs?: number, marksMs?: number) =>
    new GroupCommit(db, repos, tickMs, marksMs, pipeline);

  it('writes a tick of 20 jobs (running, a step, the result) in one statement, all stored', async () => {
    const ids = await dispatchedJobs(20);
    const gc = mk(store.db, store, 10_000); // flushed by hand below
    const done = ids.map((id, i) => {
      void gc.running(id, 'ag', T(1));
      void gc.stepStarted(id, 0, 'build', T(2));
      void gc.stepFinished(id, 0, i % 2, false, T(3));
      return gc.finish(id, i % 2 ? 'failed' : 'succeeded', { exitCode: i % 2, reason: null }, T(4));
    });
    await gc.flush();
    expect(await Promise.all(done)).toEqual(ids.map(() => true));
    expect(gc.statements).toBe(1); // one statement for the whole tick
    for (const [i, id] of ids.entries()) {
      const row = (await store.jobs.get(id))!;
      expect([row.state, row.exit_code, row.started_at?.getTime(), row.finished_at?.getTime()]).toEqual([
        i % 2 ? 'failed' : 'succeeded',
        i % 2,
        T(1).getTime(),
        T(4).getTime(),
      ]);
      const steps = await store.logs.steps(id);
      expect(steps.map((s) => [s.idx, s.name, s.exit_code, s.finished_at?.getTime()])).toEqual([
        [0, 'build', i % 2, T(3).getTime()],
      ]);
    }
  });

  it('a result is not resolved before its commit, and a second result for a job does not win', async () => {
    const [id] = await dispatchedJobs(1);
    // A tick that does not end during the test: the commit happens at the flush below, so what is
    // seen before it cannot depend on how fast a loaded host runs the test.
    const gc = mk(store.db, store, 10_000);
    let resolved = false;
    const first = gc.finish(id!, 'succeeded', { exitCode: 0, reason: null }, T(5)).then((v) => {
      resolved = true;
      return v;
    });
    const second = gc.finish(id!, 'failed', { exitCode: 1, reason: 'late' }, T(6));
    await new Promise((r) => setTimeout(r, 20));
    // Within the tick nothing is written yet, so nothing may be acknowledged yet.
    expect(resolved).toBe(false);
    expect((await store.jobs.get(id!))!.state).toBe('dispatched');
    await gc.flush();
    expect([await first, await second]).toEqual([true, false]);
    expect((await store.jobs.get(id!))!.state).toBe('succeeded');
  });

  it('a failing commit rejects its writes (no ack) and a later write of the same result succeeds', async () => {
    const [id] = await dispatchedJobs(1);
    const { db, down } = breakable(store.db);
    const jobs = { ...store.jobs, finish: store.jobs.finish.bind(store.jobs) };
    const gc = mk(db, { jobs: jobs as typeof store.jobs, logs: store.logs }, 1);
    down.on = true;
    // The one-by-one retry meets the same outage.
    jobs.finish = () => Promise.reject(new Error('Connection terminated unexpectedly'));
    await expect(gc.finish(id!, 'succeeded', { exitCode: 0, reason: null }, T(7))).rejects.toThrow(
      /terminated/,
    );
    expect((await store.jobs.get(id!))!.state).toBe('dispatched');
    down.on = false;
    expect(await gc.finish(id!, 'succeeded', { exitCode: 0, reason: null }, T(8))).toBe(true);
    expect((await store.jobs.get(id!))!.finished_at?.getTime()).toBe(T(8).getTime());
  });

  it('one bad row fails only its own write: the batch is retried write by write', async () => {
    const ids = await dispatchedJobs(3);
    const gc = mk(store.db, store, 10_000);
    // PostgreSQL text cannot hold U+0000: this row fails the batch's statement, and then on its own.
    const results = ids.map((id, i) =>
      gc.finish(id, 'failed', { exitCode: 1, reason: i === 1 ? 'bad\u0000reason' : 'ok' }, T(9)).then(
        (v) => v,
        () => 'rejected',
      ),
    );
    await gc.flush();
    expect(await Promise.all(results)).toEqual([true, 'rejected', true]);
    expect((await store.jobs.get(ids[1]!))!.state).toBe('dispatched');
    expect((await store.jobs.get(ids[2]!))!.reason).toBe('ok');
  });

  it('a step ended in a later tick than its start updates the row written by the first', async () => {
    const [id] = await dispatchedJobs(1);
    const gc = mk(store.db, store, 10_000);
    void gc.stepStarted(id!, 0, 'a', T(1));
    await gc.flush();
    void gc.stepStarted(id!, 0, 'a again (re-sent)', T(2)); // re-sent start: ignored
    void gc.stepFinished(id!, 0, 3, true, T(3));
    await gc.flush();
    const [s] = await store.logs.steps(id!);
    expect([s!.name, s!.exit_code, s!.timed_out, s!.started_at.getTime(), s!.finished_at?.getTime()]).toEqual(
      ['a', 3, true, T(1).getTime(), T(3).getTime()],
    );
  });

  it('"running" and step rows with no result behind them are stored within their own deadline', async () => {
    const [id] = await dispatchedJobs(1);
    const tick = 10;
    const marksMs = 60;
    // Records when the first statement of the batch leaves for the database.
    let sentAt: number | undefined;
    const plugin: KyselyPlugin = {
      transformQuery(args) {
        sentAt ??= performance.now();
        return args.node;
      },
      transformResult: async (args) => args.result,
    };
    const gc = mk(store.db.withPlugin(plugin), store, tick, marksMs);
    const t0 = performance.now();
    const writes = [gc.running(id!, 'ag', T(1)), gc.stepStarted(id!, 0, 'build', T(2))];
    // The upper bound is a timer of our own, not a wall-clock span: on a loaded host both timers
    // can come due in the same late turn of the loop, and then the earlier one (the batch's) runs
    // first, its statement built before ours runs. A hold-back twice as long always comes after it.
    const sentBeforeLimit = new Promise<boolean>((r) =>
      setTimeout(() => r(sentAt !== undefined), 2 * marksMs - tick),
    );
    await Promise.all(writes);
    // Marks wait for their own deadline, not the results' tick. They may leave up to a tick early
    // (a mark due within a tick goes with the flush at hand), and a timer's clock is the event
    // loop's, taken at the start of its turn.
    expect(sentAt! - t0).toBeGreaterThanOrEqual(marksMs - tick);
    expect(await sentBeforeLimit).toBe(true);
    const row = (await store.jobs.get(id!))!;
    expect([row.state, row.started_at?.getTime()]).toEqual(['running', T(1).getTime()]);
    expect((await store.logs.steps(id!)).map((s) => s.name)).toEqual(['build']);
  });

  it("a result takes its own job's marks into its statement; another job's marks wait for their own result", async () => {
    const [a, b] = await dispatchedJobs(2);
    const gc = mk(store.db, store, 10, 60_000);
    let aMarksDone = false;
    const aMarks = Promise.all([gc.running(a!, 'ag', T(1)), gc.stepStarted(a!, 0, 'build', T(2))]).then(
      () => (aMarksDone = true),
    );
    const bMarks = [
      gc.running(b!, 'ag', T(1)),
      gc.stepStarted(b!, 0, 'b', T(2)),
      gc.stepFinished(b!, 0, 0, false, T(3)),
    ];
    const before = gc.statements;
    const t0 = performance.now();
    // Someone waits on this result: it goes out in this turn of the event loop, with its job's marks.
    await expect(gc.finish(b!, 'succeeded', { exitCode: 0, reason: null }, T(4), true)).resolves.toBe(true);
    await Promise.all(bMarks);
    // Half the marks' deadline: ample on a loaded host, and still well short of a wait for it.
    expect(performance.now() - t0).toBeLessThan(30_000);
    expect(gc.statements - before).toBe(1);
    const rowB = (await store.jobs.get(b!))!;
    expect([rowB.state, rowB.started_at?.getTime()]).toEqual(['succeeded', T(1).getTime()]);
    expect((await store.logs.steps(b!)).map((s) => [s.name, s.exit_code, s.finished_at?.getTime()])).toEqual([
      ['b', 0, T(3).getTime()],
    ]);
    // Job a's marks did not ride: nothing of them is stored, and their promises are still open.
    expect(aMarksDone).toBe(false);
    expect((await store.jobs.get(a!))!.state).toBe('dispatched');
    expect(await store.logs.steps(a!)).toEqual([]);
    await expect(gc.finish(a!, 'failed', { exitCode: 1, reason: null }, T(5), true)).resolves.toBe(true);
    await aMarks;
    expect(gc.statements - before).toBe(2);
    const rowA = (await store.jobs.get(a!))!;
    expect([rowA.state, rowA.started_at?.getTime()]).toEqual(['failed', T(1).getTime()]);
    expect((await store.logs.steps(a!)).map((s) => s.name)).toEqual(['build']);
  });

  it('a result settles only while the row has no owner or is owned by the writer', async () => {
    const run = `r-gco-${++n}`;
    await store.jobs.insertRun(
      { id: run, name: null },
      ['a', 'b'].map((x) => ({ id: `${run}-${x}`, name: x, runsOn: ['linux'], spec: { steps: [] } })),
      new Date(),
    );
    const [mine, theirs] = [`${run}-a`, `${run}-b`];
    await store.jobs.claimSpec(mine, 'ag', new Date(), 'inst-A');
    await store.jobs.claimSpec(theirs, 'ag', new Date(), 'inst-B');
    const gc = mk(store.db, store, 10_000);
    const fields = { exitCode: 0, reason: null, owner: 'inst-A' };
    const done = [gc.finish(mine, 'succeeded', fields, T(1)), gc.finish(theirs, 'succeeded', fields, T(1))];
    await gc.flush();
    expect(await Promise.all(done)).toEqual([true, false]);
    expect((await store.jobs.get(mine))!.state).toBe('succeeded');
    expect((await store.jobs.get(theirs))!.state).toBe('dispatched');
    // The same in the ordered transaction (a step both ended before and started in the tick).
    void gc.stepFinished(theirs, 5, 0, false, T(2));
    void gc.stepStarted(theirs, 5, 'x', T(2));
    const late = gc.finish(theirs, 'failed', { ...fields, exitCode: 1 }, T(3));
    await gc.flush();
    expect(await late).toBe(false);
    expect((await store.jobs.get(theirs))!.state).toBe('dispatched');
  });

  type Op =
    | { k: 'running'; job: number; agent: 'ag' | 'other' }
    | { k: 'stepStarted'; job: number; idx: number }
    | { k: 'stepFinished'; job: number; idx: number; code: number }
    | { k: 'finish'; job: number; state: 'succeeded' | 'failed'; soon: boolean }
    | { k: 'flush' }
    | { k: 'turn' };
  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.record({ k: fc.constant('running' as const), job: fc.nat(2), agent: fc.constantFrom('ag', 'other') }),
    fc.record({ k: fc.constant('stepStarted' as const), job: fc.nat(2), idx: fc.nat(2) }),
    fc.record({ k: fc.constant('stepFinished' as const), job: fc.nat(2), idx: fc.nat(2), code: fc.nat(3) }),
    fc.record({
      k: fc.constant('finish' as const),
      job: fc.nat(2),
      state: fc.constantFrom('succeeded', 'failed'),
      // Someone waits: the result goes out in the next turn, taking only its own job's marks.
      soon: fc.boolean(),
    }),
    fc.constant({ k: 'flush' as const }),
    fc.constant({ k: 'turn' as const }),
  );

  async function snapshot(ids: string[]) {
    const out = [];
    for (const id of ids) {
      const r = (await store.jobs.get(id))!;
      const steps = await store.logs.steps(id);
      out.push({
        state: r.state,
        exit: r.exit_code,
        started: r.started_at?.getTime() ?? null,
        finished: r.finished_at?.getTime() ?? null,
        steps: steps.map((s) => [
          s.idx,
          s.name,
          s.exit_code,
          s.started_at.getTime(),
          s.finished_at?.getTime() ?? null,
        ]),
      });
    }
    return out;
  }

  /** Jobs still queued (claimable). */
  async function queuedJobs(count: number): Promise<string[]> {
    const run = `r-gcq-${++n}`;
    const ids = Array.from({ length: count }, (_, i) => `j-gcq-${n}-${i}`);
    await store.jobs.insertRun(
      { id: run, name: null },
      ids.map((id) => ({ id, name: id, runsOn: ['linux'], spec: { steps: [{ run: id }] } })),
      new Date(),
    );
    return ids;
  }

  it('claims ride on pending writes: one statement stores the result and wins the queued claims', async () => {
    const [done] = await dispatchedJobs(1);
    const [q1, q2] = await queuedJobs(2);
    const [taken] = await dispatchedJobs(1); // not queued: its claim must lose
    const gc = mk(store.db, store, 10_000);
    const fin = gc.finish(done!, 'succeeded', { exitCode: 0, reason: null }, T(4));
    void gc.stepStarted(done!, 0, 'build', T(2));
    const claims = [q1!, q2!, taken!].map((jobId, i) => ({ jobId, agentId: `ag${i}` }));
    const ride = gc.claimWith(claims, T(5), 'inst-a');
    expect(ride).toBeDefined();
    const claimed = await ride!;
    expect([...claimed.keys()].sort()).toEqual([q1, q2].sort());
    expect(claimed.get(q1!)).toEqual({ steps: [{ run: q1 }] });
    expect(await fin).toBe(true); // acknowledged by the same commit, before any tick
    expect(gc.statements).toBe(1);
    const row = (await store.jobs.get(q2!))!;
    expect([row.state, row.agent_id, row.attempts, row.owner_instance, row.dispatched_at?.getTime()]).toEqual(
      ['dispatched', 'ag1', 1, 'inst-a', T(5).getTime()],
    );
    expect((await store.jobs.get(taken!))!.agent_id).toBe('ag');
    expect((await store.jobs.get(done!))!.state).toBe('succeeded');
    expect((await store.logs.steps(done!)).map((s) => s.name)).toEqual(['build']);
  });

  it('a riding claim with alternates takes the first still queued (one statement); the pipeline takes only the planned job', async () => {
    const [done] = await dispatchedJobs(1);
    const [q0, q1, q2, q3] = await queuedJobs(4);
    expect(await store.jobs.claim(q0!, 'peer', T(1))).toBe(true);
    expect(await store.jobs.claim(q1!, 'peer', T(1))).toBe(true);
    const gc = mk(store.db, store, 10_000);
    const fin = gc.finish(done!, 'succeeded', { exitCode: 0, reason: null }, T(4));
    const claimed = await gc.claimWith([{ jobId: q0!, agentId: 'ag-x', alts: [q1!, q2!, q3!] }], T(5), 'i');
    expect(await fin).toBe(true);
    expect(gc.statements).toBe(1);
    // On the embedded database there is one instance and no peer to lose a job to: no alternates.
    const expected = pipeline === undefined ? [] : [q2];
    expect([...claimed!.keys()]).toEqual(expected);
    expect((await store.jobs.get(q2!))!.agent_id).toBe(pipeline === undefined ? null : 'ag-x');
    expect((await store.jobs.get(q3!))!.state).toBe('queued');
  });

  it('claims do not ride with nothing pending, on a batch touching their job, or with a batch in flight', async () => {
    const [a, b] = await dispatchedJobs(2);
    const [q] = await queuedJobs(1);
    const gc = mk(store.db, store, 10_000);
    expect(gc.claimWith([{ jobId: q!, agentId: 'x' }], T(1), undefined)).toBeUndefined();
    const fin = gc.finish(a!, 'succeeded', { exitCode: 0, reason: null }, T(2));
    expect(gc.claimWith([{ jobId: a!, agentId: 'x' }], T(1), undefined)).toBeUndefined();
    // Nor when one of its alternates is in the batch.
    expect(gc.claimWith([{ jobId: q!, agentId: 'x', alts: [a!] }], T(1), undefined)).toBeUndefined();
    const flushing = gc.flush(); // in flight from here
    void gc.running(b!, 'ag', T(3));
    expect(gc.claimWith([{ jobId: q!, agentId: 'x' }], T(1), undefined)).toBeUndefined();
    await flushing;
    expect(await fin).toBe(true);
    await gc.flush();
    expect((await store.jobs.get(q!))!.state).toBe('queued');
  });

  it('a failed ride rejects the claims and retries the pending writes one by one', async () => {
    const [done] = await dispatchedJobs(1);
    const gc = mk(store.db, store, 10_000);
    const fin = gc.finish(done!, 'failed', { exitCode: 3, reason: 'x' }, T(4));
    // PostgreSQL refuses a NUL in text: the whole statement fails, through no fault of the result.
    const ride = gc.claimWith([{ jobId: 'bad\u0000id', agentId: 'x' }], T(5), undefined);
    await expect(ride).rejects.toThrow();
    expect(await fin).toBe(true);
    expect((await store.jobs.get(done!))!.exit_code).toBe(3);
  });

  it('property: any sequence of writes, batched at any points, stores what one-by-one writes store', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 25 }), async (ops) => {
        const batched = await dispatchedJobs(3, 'gcb');
        const plain = await dispatchedJobs(3, 'gcp');
        // Marks never reach their own deadline here: they leave with a result, a flush, or the end.
        const gc = mk(store.db, store, 10_000, 60_000);
        const pending: Promise<unknown>[] = [];
        const results: { batched: unknown[]; plain: unknown[] } = { batched: [], plain: [] };
        for (const [t, o] of ops.entries()) {
          if (o.k === 'flush') {
            await gc.flush();
            continue;
          }
          if (o.k === 'turn') {
            // Lets a due result's partial flush start (it writes while later ops join the next batch).
            await new Promise((r) => setImmediate(r));
            continue;
          }
          const at = T(t);
          const [b, p] = [batched[o.job]!, plain[o.job]!];
          if (o.k === 'running') {
            pending.push(gc.running(b, o.agent, at));
            await store.jobs.markRunning(p, o.agent, at);
          } else if (o.k === 'stepStarted') {
            pending.push(gc.stepStarted(b, o.idx, `s${o.idx}`, at));
            await store.logs.stepStarted(p, o.idx, `s${o.idx}`, at);
          } else if (o.k === 'stepFinished') {
            pending.push(gc.stepFinished(b, o.idx, o.code, false, at));
            await store.logs.stepFinished(p, o.idx, o.code, false, at);
          } else {
            const fields = { exitCode: o.state === 'failed' ? 1 : 0, reason: null };
            const slot = results.plain.length; // results are compared by op, not by resolution order
            pending.push(gc.finish(b, o.state, fields, at, o.soon).then((v) => (results.batched[slot] = v)));
            results.plain.push(await store.jobs.finish(p, o.state, fields, at));
          }
        }
        await gc.flush();
        await Promise.all(pending);
        expect(results.batched).toEqual(results.plain);
        expect(await snapshot(batched)).toEqual(await snapshot(plain));
      }),
      { numRuns: 60 },
    );
  }, 60_000);
});
