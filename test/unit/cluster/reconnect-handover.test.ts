/**
 * A job outlives its instance: dispatchers of several instances over one real database (PGlite). An
 * agent that was running a job for instance A reconnects to B: B takes the job over with one
 * conditional update (exactly one winner among instances that try), A can no longer settle it, and
 * B stores the result. A cancel sent to an instance that does not hold the job is carried out by
 * its owner. A starting instance marks only its own agents gone.
 */
import fc from 'fast-check';
import { sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { applyCancelRequests, cancelAnywhere } from '../../../src/cluster/remote-cancel.js';
import { newConnectedAgent } from '../../../src/dispatch/agent-registry.js';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { runSpecSchema } from '../../../src/jobs/run-spec.js';
import type { OrchestratorMessage } from '../../../src/protocol/messages.js';
import { AgentsRepo } from '../../../src/store/agents-repo.js';
import { systemClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';
import { wipeStore } from '../../helpers/store-per-file.js';

let fresh: Awaited<ReturnType<typeof freshStore>>;
beforeAll(async () => {
  fresh = await freshStore();
}, 60_000);
afterAll(async () => {
  await fresh.close();
});
beforeEach(async () => {
  await wipeStore(fresh.store);
});

const log = pino({ level: 'silent' });
const spec = runSpecSchema.parse({ jobs: { a: { runsOn: ['linux'], steps: [{ run: 'true' }] } } });
const dispatchers: Dispatcher[] = [];
afterAll(async () => {
  for (const d of dispatchers) await d.stop();
});

function instance(id: string): Dispatcher {
  const d = new Dispatcher({
    store: fresh.store,
    clock: systemClock,
    logger: log,
    instanceId: id,
    reconnectGraceMs: 60_000,
  });
  dispatchers.push(d);
  return d;
}

/** An agent connected to `d`; what it is sent is kept. */
function connect(d: Dispatcher, id: string) {
  const sent: OrchestratorMessage[] = [];
  const conn = newConnectedAgent({
    id,
    labels: ['linux'],
    scaled: null,
    nowMs: Date.now(),
    send: (m) => sent.push(m),
    close: () => {},
  });
  d.registry.add(conn);
  return { conn, sent };
}

/** A job submitted to `a` and running there on agent `agentId`. */
async function runningOn(a: Dispatcher, agentId: string) {
  const agent = connect(a, agentId);
  const { jobs } = await a.submit(spec);
  const jobId = jobs[0]!.id;
  await a.requestPump();
  await a.active.onJobStarted(agentId, jobId);
  await a.writes.flush(); // "running" goes out with the group commit's next tick
  expect((await fresh.store.jobs.get(jobId))?.state).toBe('running');
  return { jobId, agent };
}

const row = async (id: string) => (await fresh.store.jobs.get(id))!;

describe('taking over a job whose agent reconnected to another instance', () => {
  it('the new instance owns it, stores its result; the old owner cannot settle it any more', async () => {
    const a = instance('ha');
    const b = instance('hb');
    const { jobId } = await runningOn(a, 'ag-1');
    // The agent's link moves to B (A is dead or cut off; A still holds the job in memory).
    expect(await b.active.adoptFromPeer('ag-1', jobId)).toBe(true);
    expect((await row(jobId)).owner_instance).toBe('hb');
    // A's agent-lost settle (its grace ran out) is refused by the owner condition.
    await a.active.loseJob(a.active.get(jobId)!, 'agent did not come back');
    expect((await row(jobId)).state).toBe('running');
    expect(a.active.has(jobId)).toBe(false);
    // B accepts the agent's result.
    connect(b, 'ag-1');
    expect(await b.active.onJobFinished('ag-1', jobId, 'succeeded', 0)).toBe(true);
    expect((await row(jobId)).state).toBe('succeeded');
  });

  it('is refused for another agent, a job that is not active, and by the owner itself', async () => {
    const a = instance('ra');
    const b = instance('rb');
    const { jobId } = await runningOn(a, 'ag-2');
    expect(await b.active.adoptFromPeer('someone-else', jobId)).toBe(false);
    expect(await a.active.adoptFromPeer('ag-2', jobId)).toBe(false); // already A's: nothing to take
    expect(b.active.has(jobId)).toBe(false);
    await a.active.onJobFinished('ag-2', jobId, 'succeeded', 0);
    expect(await b.active.adoptFromPeer('ag-2', jobId)).toBe(false);
    expect((await row(jobId)).owner_instance).toBe('ra');
  });

  it('a dispatched job whose "started" was lost with its owner becomes running on adoption', async () => {
    const a = instance('da');
    const b = instance('db');
    connect(a, 'ag-3');
    const { jobs } = await a.submit(spec);
    await a.requestPump();
    expect((await row(jobs[0]!.id)).state).toBe('dispatched');
    expect(await b.active.adoptFromPeer('ag-3', jobs[0]!.id)).toBe(true);
    expect((await row(jobs[0]!.id)).state).toBe('running');
  });

  it('property: of any number of instances trying at once, exactly one wins while the job is active on that agent', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 5 }),
        fc.constantFrom('running', 'dispatched', 'succeeded', 'queued'),
        fc.boolean(),
        async (n, state, sameAgent) => {
          await wipeStore(fresh.store);
          const owner = instance('p-owner');
          const { jobId } = await runningOn(owner, 'ag-p');
          if (state !== 'running')
            await sql`update jobs set state = ${state} where id = ${jobId}`.execute(fresh.store.db);
          const ids = Array.from({ length: n }, (_, i) => `p-${i}`);
          const others = ids.map((id) => instance(id));
          const won = await Promise.all(
            others.map((d) => d.active.adoptFromPeer(sameAgent ? 'ag-p' : 'ag-x', jobId)),
          );
          const winners = ids.filter((_, i) => won[i]);
          const active = state === 'running' || state === 'dispatched';
          expect(winners.length).toBe(active && sameAgent ? 1 : 0);
          // The row names the winner, and only the winner holds the job in memory.
          expect((await row(jobId)).owner_instance).toBe(winners[0] ?? 'p-owner');
          expect(others.filter((d) => d.active.has(jobId)).length).toBe(winners.length);
          for (const d of [owner, ...others]) await d.stop();
        },
      ),
      { numRuns: 25 },
    );
  });
});

describe('cancel across instances', () => {
  it('a cancel sent to B for a job running on an agent of A reaches the agent; the job ends cancelled', async () => {
    const a = instance('ca');
    const b = instance('cb');
    const { jobId, agent } = await runningOn(a, 'ag-c');
    const deps = (d: Dispatcher, id: string) => ({
      store: fresh.store,
      dispatcher: d,
      clock: systemClock,
      instanceId: id,
      aliveInstances: async () => ['ca', 'cb'],
      waitMs: 3_000,
      log,
    });
    // A carries requests out as its LISTEN/poll would.
    const owner = setInterval(() => void applyCancelRequests(deps(a, 'ca')), 20);
    try {
      const out = await cancelAnywhere(deps(b, 'cb'), jobId);
      expect(out).toEqual({ kind: 'cancelled' });
    } finally {
      clearInterval(owner);
    }
    expect((await row(jobId)).state).toBe('cancelled');
    expect(agent.sent).toContainEqual(expect.objectContaining({ type: 'job.cancel', jobId }));
  });

  it('without the owner answering, the request stays on the row (202 case); a dead owner’s job is settled at once', async () => {
    const a = instance('wa');
    const b = instance('wb');
    const { jobId } = await runningOn(a, 'ag-w');
    const base = {
      store: fresh.store,
      dispatcher: b,
      clock: systemClock,
      instanceId: 'wb',
      waitMs: 200,
      log,
    };
    const out = await cancelAnywhere({ ...base, aliveInstances: async () => ['wa', 'wb'] }, jobId);
    expect(out).toEqual({ kind: 'requested', state: 'running' });
    expect((await fresh.store.jobs.cancelRequestsFor('wa')).map((r) => r.id)).toEqual([jobId]);
    // The owner is gone: the job is settled by whoever was asked.
    const dead = await cancelAnywhere({ ...base, aliveInstances: async () => ['wb'] }, jobId);
    expect(dead).toEqual({ kind: 'cancelled' });
    expect((await row(jobId)).state).toBe('cancelled');
  });

  it('a queued job is cancelled from any instance, even one that never read it', async () => {
    const a = instance('qa');
    const b = instance('qb');
    a.noteStaticToken('away', ['linux'], null); // its agent is not connected: the job waits
    const { jobs } = await a.submit(spec);
    const out = await cancelAnywhere(
      {
        store: fresh.store,
        dispatcher: b,
        clock: systemClock,
        instanceId: 'qb',
        aliveInstances: async () => ['qa', 'qb'],
        log,
      },
      jobs[0]!.id,
    );
    expect(out).toEqual({ kind: 'cancelled' });
    expect((await row(jobs[0]!.id)).state).toBe('cancelled');
  });

  it('an instance whose queue still holds a stale copy of a job claimed elsewhere does not settle it behind the agent', async () => {
    const a = instance('sa');
    const b = instance('sb');
    b.noteStaticToken('away', ['linux'], null);
    const { jobs } = await b.submit(spec); // B holds it as queued, with no agent of its own
    const jobId = jobs[0]!.id;
    connect(a, 'ag-s');
    await a.resyncQueued();
    await a.requestPump();
    await a.active.onJobStarted('ag-s', jobId);
    await a.writes.flush();
    expect(b.queue.get(jobId)).toBeDefined(); // B's copy is stale now
    expect(await b.cancel(jobId)).toBe('not-open');
    expect((await row(jobId)).state).toBe('running');
  });

  it('a cancel sent to the old owner after the agent moved on reaches the new owner', async () => {
    const a = instance('ma');
    const b = instance('mb');
    const { jobId } = await runningOn(a, 'ag-m');
    const moved = connect(b, 'ag-m');
    expect(await b.active.adoptFromPeer('ag-m', jobId)).toBe(true);
    // A still holds the job in memory; its own settle is refused, so the request goes to B.
    const deps = (d: Dispatcher, id: string) => ({
      store: fresh.store,
      dispatcher: d,
      clock: systemClock,
      instanceId: id,
      aliveInstances: async () => ['ma', 'mb'],
      waitMs: 3_000,
      log,
    });
    const owner = setInterval(() => void applyCancelRequests(deps(b, 'mb')), 20);
    try {
      expect(await cancelAnywhere(deps(a, 'ma'), jobId)).toEqual({ kind: 'cancelled' });
    } finally {
      clearInterval(owner);
    }
    expect(moved.sent).toContainEqual(expect.objectContaining({ type: 'job.cancel', jobId }));
  });

  it('an agent that comes back with a job cancelled while its owner was away is told to stop', async () => {
    const a = instance('xa');
    const b = instance('xb');
    const { jobId } = await runningOn(a, 'ag-x');
    await fresh.store.jobs.requestCancel(jobId, 'cancelled by operator', new Date());
    expect(await b.active.adoptFromPeer('ag-x', jobId)).toBe(true);
    expect((await row(jobId)).state).toBe('cancelled');
    expect(b.active.has(jobId)).toBe(false);
  });
});

describe('agents table with several instances', () => {
  it('a starting instance marks only its own (and unowned) agents gone', async () => {
    const mine = new AgentsRepo(fresh.store.db);
    mine.ownedBy('ga');
    const peer = new AgentsRepo(fresh.store.db);
    peer.ownedBy('gb');
    const now = new Date();
    const base = {
      kind: 'static' as const,
      labels: [],
      scalerName: null,
      hostname: null,
      version: null,
      now,
    };
    await mine.connected({ ...base, id: 'mine-1' });
    await peer.connected({ ...base, id: 'peer-1' });
    await sql`insert into agents (id, kind, labels, state, connected_at, last_seen_at)
              values ('legacy-1', 'static', '[]', 'connected', now(), now())`.execute(fresh.store.db);
    await mine.markAllGone(now);
    const states = Object.fromEntries((await mine.list()).map((r) => [r.id, r.state]));
    expect(states).toEqual({ 'mine-1': 'gone', 'peer-1': 'connected', 'legacy-1': 'gone' });
    // An agent that moved to the peer is not marked gone by its old instance's late close.
    await peer.connected({ ...base, id: 'mine-1' });
    await mine.gone('mine-1', now);
    expect((await peer.list()).find((r) => r.id === 'mine-1')?.state).toBe('connected');
    // The leader's sweep clears a dead instance's rows.
    await peer.markGoneOf(['gb'], now);
    expect((await peer.list()).every((r) => r.state === 'gone')).toBe(true);
  });
});
