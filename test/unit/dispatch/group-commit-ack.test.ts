/**
 * Hot path, through the real message routing and Dispatcher on the real PGlite store: a result is
 * acknowledged to its agent only once its group commit is stored, an outage means no ack and a
 * retry, and one dispatch pass claims several idle agents' jobs in one statement without ever
 * giving a job to two agents. Failures are injected in front of the database (a Kysely plugin).
 */
import type { KyselyPlugin } from 'kysely';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { newConnectedAgent } from '../../../src/dispatch/agent-registry.js';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { runSpecSchema } from '../../../src/jobs/run-spec.js';
import type { OrchestratorMessage } from '../../../src/protocol/messages.js';
import { routeMessage } from '../../../src/server/agent-routing.js';
import { createStore, type Store } from '../../../src/store/index.js';
import { systemClock } from '../../../src/util/clock.js';
import { storePerFile } from '../../helpers/store-per-file.js';
import { eventually } from '../../helpers/orchestrator.js';

const fresh = storePerFile();
const { stops } = fresh;

const broken = () => new Error('Connection terminated unexpectedly');

/** The real store, with a switch that fails every statement and every result write while on. */
function breakableStore() {
  // `refused` counts what the outage turned away: a test waits on it rather than on the clock.
  const down = { on: false, refused: 0 };
  const refuse = () => (down.refused++, broken());
  const plugin: KyselyPlugin = {
    transformQuery(args) {
      if (down.on) throw refuse();
      return args.node;
    },
    transformResult: async (args) => args.result,
  };
  const jobs = Object.create(fresh.store.jobs) as Store['jobs'];
  jobs.finish = (...a) => (down.on ? Promise.reject(refuse()) : fresh.store.jobs.finish(...a));
  jobs.claimMany = (...a) => (down.on ? Promise.reject(refuse()) : fresh.store.jobs.claimMany(...a));
  jobs.requeue = (...a) => (down.on ? Promise.reject(refuse()) : fresh.store.jobs.requeue(...a));
  const store: Store = { ...fresh.store, db: fresh.store.db.withPlugin(plugin), jobs };
  return { store, down };
}

function setup(store: Store) {
  const d = new Dispatcher({
    store,
    clock: systemClock,
    logger: pino({ level: 'silent' }),
    // These tests are about the dispatch pass's claims: every job is queued first.
    claimAtSubmit: false,
  });
  stops.push(() => d.stop());
  return d;
}

function connect(d: Dispatcher, id: string) {
  const messages: OrchestratorMessage[] = [];
  const agent = newConnectedAgent({
    id,
    labels: ['linux'],
    scaled: null,
    nowMs: Date.now(),
    send: (m) => void messages.push(m),
    close: () => {},
  });
  d.registry.add(agent);
  d.noteStaticToken(id, ['linux'], null);
  return { agent, messages };
}

const spec = (n: number) =>
  runSpecSchema.parse({
    jobs: Object.fromEntries(
      Array.from({ length: n }, (_, i) => [`j${i}`, { runsOn: ['linux'], steps: [{ run: 'true' }] }]),
    ),
  });

describe('hot path: acks follow the group commit', () => {
  it('job.finished is acked only after its row is final; during an outage no ack, then ack once stored', async () => {
    const { store, down } = breakableStore();
    const d = setup(store);
    const a = connect(d, 'ack-a');
    const { jobs } = await d.submit(spec(2));
    await d.requestPump();
    const deps = { store, dispatcher: d, clock: systemClock, isStopping: () => false };
    const sent: OrchestratorMessage[] = [];
    const send = (m: OrchestratorMessage) => void sent.push(m);
    const first = jobs.find((j) => a.agent.busyJobId === j.id)!.id;
    await routeMessage(deps, a.agent, { type: 'job.started', jobId: first }, send);
    await routeMessage(deps, a.agent, { type: 'step.started', jobId: first, idx: 0, name: 's' }, send);
    // The ack is sent when routeMessage's stored result comes back: check the row at that moment.
    let finalWhenAcked: string | undefined;
    const sendChecked = (m: OrchestratorMessage) => {
      sent.push(m);
      if (m.type === 'job.finished.ack') void store.jobs.get(first).then((r) => (finalWhenAcked = r?.state));
    };
    await routeMessage(
      deps,
      a.agent,
      { type: 'job.finished', jobId: first, result: 'succeeded', exitCode: 0 },
      sendChecked,
    );
    await eventually(() => finalWhenAcked !== undefined, 5_000, 'the ack and the row read');
    expect(finalWhenAcked).toBe('succeeded');
    expect((await fresh.store.jobs.get(first))!.started_at).not.toBeNull();
    expect((await fresh.store.logs.steps(first)).map((s) => s.name)).toEqual(['s']);

    // The second job, finished while the database is away: no ack until it is stored.
    // Not the first job still held: its result again would be acked from memory, stored already.
    await eventually(
      () => a.agent.busyJobId !== undefined && a.agent.busyJobId !== first,
      5_000,
      'the second job assigned',
    );
    const second = a.agent.busyJobId!;
    down.on = true;
    sent.length = 0;
    await routeMessage(
      deps,
      a.agent,
      { type: 'job.finished', jobId: second, result: 'failed', exitCode: 2, message: 'boom' },
      send,
    );
    // The write was turned away, then tried again and turned away again: still no ack.
    const refusedAtFinish = down.refused;
    expect(refusedAtFinish).toBeGreaterThan(0);
    await eventually(() => down.refused > refusedAtFinish, 10_000, 'a retry during the outage');
    expect(sent.filter((m) => m.type === 'job.finished.ack')).toEqual([]);
    expect((await fresh.store.jobs.get(second))!.state).toBe('dispatched');
    down.on = false;
    await eventually(() => sent.some((m) => m.type === 'job.finished.ack'), 10_000, 'acked after the outage');
    const row = (await fresh.store.jobs.get(second))!;
    expect([row.state, row.exit_code, row.reason]).toEqual(['failed', 2, 'boom']);
  });

  it("a result and its agent's next claim go out in one statement: the ack, then the next job", async () => {
    let statements = 0;
    const counter: KyselyPlugin = {
      transformQuery: (args) => (statements++, args.node),
      transformResult: async (args) => args.result,
    };
    const store = createStore(fresh.store.db.withPlugin(counter));
    const d = setup(store);
    // The group commit's own count of what it sent (one per call into the database).
    const writes = (d as unknown as { writes: { statements: number } }).writes;
    const a = connect(d, 'ride-a');
    const { jobs } = await d.submit(spec(3));
    await d.requestPump();
    const deps = { store, dispatcher: d, clock: systemClock, isStopping: () => false };
    // Acks and assignments in one list, so their order is seen.
    const send = (m: OrchestratorMessage) => void a.messages.push(m);
    const ran: string[] = [];
    for (let i = 0; i < 3; i++) {
      const id = a.agent.busyJobId!;
      ran.push(id);
      await routeMessage(deps, a.agent, { type: 'job.started', jobId: id }, send);
      await routeMessage(deps, a.agent, { type: 'step.started', jobId: id, idx: 0, name: 's' }, send);
      await routeMessage(
        deps,
        a.agent,
        { type: 'step.finished', jobId: id, idx: 0, exitCode: 0, timedOut: false, durationMs: 1 },
        send,
      );
      statements = 0;
      const before = writes.statements;
      a.messages.length = 0;
      await routeMessage(
        deps,
        a.agent,
        { type: 'job.finished', jobId: id, result: 'succeeded', exitCode: 0 },
        send,
      );
      const last = i === 2;
      await eventually(
        () => a.messages.length >= (last ? 1 : 2),
        5_000,
        last ? 'the last ack' : 'the ack and the next assignment',
      );
      expect(a.messages.map((m) => m.type)).toEqual(
        last ? ['job.finished.ack'] : ['job.finished.ack', 'job.assign'],
      );
      // One call into the database: the step row (its start and end in one insert), the result
      // (with the "running" mark folded in) and, but for the last job, the next claim.
      expect(writes.statements - before).toBe(1);
      expect(statements).toBe(last ? 2 : 3);
    }
    expect(new Set(ran).size).toBe(3);
    expect(ran.sort()).toEqual(jobs.map((j) => j.id).sort());
    for (const id of ran) {
      const row = (await fresh.store.jobs.get(id))!;
      expect([row.state, row.attempts, row.agent_id, row.started_at !== null]).toEqual([
        'succeeded',
        1,
        'ride-a',
        true,
      ]);
      expect((await fresh.store.logs.steps(id)).map((s) => [s.name, s.exit_code])).toEqual([['s', 0]]);
    }
  });

  it('a failed ride: no ack and no next job until the result is stored; then each job once', async () => {
    const { store, down } = breakableStore();
    const d = setup(store);
    const a = connect(d, 'ride-f');
    await d.submit(spec(2));
    await d.requestPump();
    const deps = { store, dispatcher: d, clock: systemClock, isStopping: () => false };
    const send = (m: OrchestratorMessage) => void a.messages.push(m);
    const first = a.agent.busyJobId!;
    a.messages.length = 0;
    down.on = true;
    await routeMessage(
      deps,
      a.agent,
      { type: 'job.finished', jobId: first, result: 'succeeded', exitCode: 0 },
      send,
    );
    const refusedAtFinish = down.refused;
    expect(refusedAtFinish).toBeGreaterThan(0);
    await eventually(() => down.refused > refusedAtFinish, 10_000, 'a retry during the outage');
    expect(a.messages).toEqual([]);
    expect(a.agent.busyJobId).toBe(first); // still busy with its unstored result
    down.on = false;
    await eventually(
      () => a.messages.some((m) => m.type === 'job.assign'),
      10_000,
      'the next job after the outage',
    );
    expect(a.messages.filter((m) => m.type === 'job.finished.ack')).toHaveLength(1);
    const second = a.agent.busyJobId!;
    expect(second).not.toBe(first);
    expect((await fresh.store.jobs.get(first))!.state).toBe('succeeded');
    const row = (await fresh.store.jobs.get(second))!;
    expect([row.state, row.attempts, row.agent_id]).toEqual(['dispatched', 1, 'ride-f']);
  });

  it('one pass fills three idle agents with one claim each, no job twice, in submission order', async () => {
    let statements = 0;
    const counter: KyselyPlugin = {
      transformQuery: (args) => (statements++, args.node),
      transformResult: async (args) => args.result,
    };
    const d = setup(createStore(fresh.store.db.withPlugin(counter)));
    const agents = ['c-1', 'c-2', 'c-3'].map((id) => connect(d, id));
    const { jobs } = await d.submit(spec(5));
    statements = 0;
    await d.requestPump();
    expect(statements).toBe(1); // the pass's one claim statement
    const given = agents.map((x) => x.messages.filter((m) => m.type === 'job.assign'));
    expect(given.map((g) => g.length)).toEqual([1, 1, 1]);
    const ids = given.map((g) => (g[0] as { job: { id: string } }).job.id).sort();
    expect(new Set(ids).size).toBe(3);
    expect(ids).toEqual(
      jobs
        .slice(0, 3)
        .map((j) => j.id)
        .sort(),
    );
    for (const id of ids) {
      const row = (await fresh.store.jobs.get(id))!;
      expect([row.state, row.attempts]).toEqual(['dispatched', 1]);
      expect(agents.map((x) => x.agent.id)).toContain(row.agent_id);
    }
    expect(d.queue.size).toBe(2);
  });

  it('an agent that closed while a multi-job claim was in flight is not sent its job; the job is queued again', async () => {
    const jobs = Object.create(fresh.store.jobs) as Store['jobs'];
    const d = setup({ ...fresh.store, jobs });
    const [stays, leaves] = ['k-1', 'k-2'].map((id) => connect(d, id));
    let calls = 0;
    jobs.claimMany = async (...a) => {
      calls++;
      const claimed = await fresh.store.jobs.claimMany(...a);
      d.registry.remove(leaves!.agent.id, leaves!.agent); // its socket closed meanwhile
      return claimed;
    };
    await d.submit(spec(2));
    await d.requestPump();
    expect(calls).toBe(1); // both claims went out in one statement
    const assigned = (x: typeof stays) => x!.messages.filter((m) => m.type === 'job.assign');
    expect([assigned(stays).length, assigned(leaves).length]).toEqual([1, 0]);
    const [left] = d.queue.all().map((j) => j.id);
    expect(left).toBeDefined();
    const row = (await fresh.store.jobs.get(left!))!;
    expect([row.state, row.agent_id]).toEqual(['queued', null]);
    expect(d.active.has(left!)).toBe(false);
  });

  it('a failed multi-job claim leaves every job uncertain, then queued again and assigned once', async () => {
    const { store, down } = breakableStore();
    const d = setup(store);
    const agents = ['u-1', 'u-2'].map((id) => connect(d, id));
    const { jobs } = await d.submit(spec(2));
    down.on = true;
    await d.requestPump();
    expect(agents.every((x) => x.agent.busyJobId === undefined)).toBe(true);
    expect(d.queue.size).toBe(0); // neither queued nor active while their claims' fate is unknown
    down.on = false;
    await eventually(
      () => agents.every((x) => x.messages.some((m) => m.type === 'job.assign')),
      10_000,
      'both assigned after the outage',
    );
    for (const j of jobs) expect((await fresh.store.jobs.get(j.id))!.attempts).toBe(1);
  });
});
