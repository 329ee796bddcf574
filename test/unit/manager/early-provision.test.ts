/**
 * A cold start's agent asked for before its run is stored (src/dispatch/early-provision.ts): only
 * when nothing else is queued, only on a backend that undoes an unrecorded start itself, taken back
 * when the run cannot be stored, and, after a crash in between, an agent that finds no job and
 * leaves nothing behind. The real manager and dispatcher over the embedded store, on recording
 * backends that ask for their record as bare metal's does.
 */
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { EarlyProvision } from '../../../src/dispatch/early-provision.js';
import { SpawnError } from '../../../src/scaler/core/spawn-errors.js';
import type { QueuedJob } from '../../../src/dispatch/job-queue.js';
import { createStore, type Store } from '../../../src/store/index.js';
import type { OpenedDatabase } from '../../../src/store/open.js';
import { memoryDatabase } from '../../helpers/data-dir.js';
import { spawnToken } from '../../helpers/harness-agents.js';
import type { HarnessOptions } from '../../helpers/harness-wiring.js';
import { ManagerHarness } from '../../helpers/manager-harness.js';
import type { RecordingBackend } from '../../helpers/recording-backend.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const made: ManagerHarness[] = [];
let db: OpenedDatabase | undefined;
let store: Store | undefined;
afterEach(async () => {
  for (const h of made.splice(0)) await h.close();
  await db?.close();
  db = store = undefined;
});

/** Harnesses over one embedded store, as the orchestrator opens it (a new agent's token kept in memory). */
const hs = {
  async make(opts: Omit<HarnessOptions, 'store'>): Promise<ManagerHarness> {
    if (!store) {
      db = await memoryDatabase();
      store = createStore(db.db, 'pglite');
    }
    const h = await ManagerHarness.create({ ...opts, store });
    made.push(h);
    return h;
  },
};

/** A backend whose launcher undoes a start it was not told to keep (bare metal's capability). */
const provisional = (b: RecordingBackend) => {
  Object.assign(b.capabilities, { localCompute: true, cleansOrphans: true, provisionalLaunch: true });
  b.recordOnSpawn = true;
};

/** How many agents had been asked for when each run's insert was called; `fail` makes the next one throw. */
function watchInserts(store: Store) {
  const seen: number[] = [];
  const ctl = {
    fail: false,
    hold: false,
    count: () => 0,
    /** Runs just before the next insert is let through. */
    before: undefined as (() => Promise<void>) | undefined,
  };
  const insert = store.jobs.insertRunHeld.bind(store.jobs);
  store.jobs.insertRunHeld = async (...args) => {
    seen.push(ctl.count());
    const before = ctl.before;
    ctl.before = undefined;
    await before?.();
    if (ctl.hold) return new Promise(() => {});
    if (ctl.fail) {
      ctl.fail = false;
      return Promise.reject(new Error('the disk refused the run'));
    }
    return insert(...args);
  };
  return { seen, ctl };
}

async function harness(opts: { maxAgents?: number; undoable?: boolean } = {}) {
  const h = await hs.make({
    config: { version: 1, scalers: [bareMetal('local', [['linux']], { maxAgents: opts.maxAgents ?? 2 })] },
    configureBackend: opts.undoable === false ? (b) => void (b.recordOnSpawn = true) : provisional,
  });
  const watch = watchInserts(h.store);
  watch.ctl.count = () => h.allSpawns().length;
  return { h, ...watch };
}

const spawnFor = (h: ManagerHarness, jobId: string) => h.allSpawns().find((s) => s.boundJobId === jobId);

describe("a cold start's agent asked for before its run is stored", () => {
  it('is asked for before the insert when nothing else is queued, bound to the job, which says so', async () => {
    const { h, seen } = await harness();
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    expect(seen).toEqual([1]);
    const req = spawnFor(h, ids[0]!);
    expect(req).toBeDefined();
    expect(h.d.queue.get(ids[0]!)?.waiting).toBe(`provisioning agent ${req!.agentId} (scaler "local")`);
    // The pass after the insert asks for no second agent for it.
    await h.pump();
    expect(h.allSpawns()).toHaveLength(1);
    // The agent comes and takes its job, as any cold agent does.
    h.backend('local').resolveSpawn(req!.agentId);
    await h.settle();
    expect((await h.registerAgent(req!.agentId)).ok).toBe(true);
    await h.settle();
    expect(h.assigned(req!.agentId)).toEqual(ids);
  });

  it('is not asked for early while another job is queued: that one keeps its place', async () => {
    const { h, seen } = await harness({ maxAgents: 2 });
    const first = await h.submit({ a: { runsOn: ['linux'] } });
    const second = await h.submit({ b: { runsOn: ['linux'] } });
    // The first job waits for its agent; the second's is asked for by the pass, after its insert.
    expect(seen).toEqual([1, 1]);
    expect(spawnFor(h, first.ids[0]!)).toBeDefined();
    expect(spawnFor(h, second.ids[0]!)).toBeDefined();
  });

  it('is not asked for early on a backend that cannot undo a start by itself', async () => {
    const { h, seen } = await harness({ undoable: false });
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    expect(seen).toEqual([0]);
    expect(spawnFor(h, ids[0]!)).toBeDefined();
  });

  it("is asked for only for the run's jobs that no idle agent took at the submit", async () => {
    const { h, seen } = await harness({ maxAgents: 2 });
    const busy = await h.registerStatic('static-1', ['linux']);
    // Busy with the first job, which it took at the submit; the run of two then finds it busy.
    const first = await h.submit({ a: { runsOn: ['linux'] } });
    expect(h.assigned(busy.id)).toEqual(first.ids);
    expect(seen).toEqual([0]);
    const s = await h.registerStatic('static-2', ['linux']);
    const second = await h.submit({ b: { runsOn: ['linux'] }, c: { runsOn: ['linux'] } });
    // One job went to the idle agent at once; only the other's agent is asked for, early.
    expect(h.assigned(s.id)).toHaveLength(1);
    expect(seen).toEqual([0, 1]);
    expect(second.ids.filter((id) => spawnFor(h, id))).toHaveLength(1);
  });

  it('is taken back when the run cannot be stored: no agent, record or live token is left', async () => {
    const { h, ctl } = await harness();
    ctl.fail = true;
    await expect(h.submit({ a: { runsOn: ['linux'] } })).rejects.toThrow('the disk refused the run');
    await h.settle();
    const [req] = h.allSpawns();
    expect(req).toBeDefined();
    // Its start was still under way: it is called off, and the backend holds no compute for it.
    const b = h.backend('local');
    expect(b.aborted).toEqual([req!.agentId]);
    expect(b.agents.size).toBe(0);
    expect(h.manager.entries()).toEqual([]);
    expect(await h.spawnRows()).toEqual([]);
    expect(h.d.queue.size).toBe(0);
    expect(await h.registerAgent(req!.agentId, { token: spawnToken(req!) })).toMatchObject({ ok: false });
    // Nothing was lost either: the next submit starts its own agent.
    const { ids } = await h.submit({ b: { runsOn: ['linux'] } });
    expect(spawnFor(h, ids[0]!)).toBeDefined();
  });

  it('after a crash before the insert, the next start reclaims its agent: no job, record or token is left', async () => {
    const { h, ctl } = await harness();
    ctl.hold = true;
    // The orchestrator "dies" inside the insert: the submit is never answered.
    void h.submit({ a: { runsOn: ['linux'] } });
    await h.settle();
    const [req] = h.allSpawns();
    expect((await h.spawnRows()).map((r) => r.agent_id)).toEqual([req!.agentId]);
    const jobId = req!.boundJobId!;
    const h2 = await hs.make({
      config: { version: 1, scalers: [bareMetal('local', [['linux']], { maxAgents: 2 })] },
      configureBackend: (b) => {
        provisional(b);
        // Its compute is still there, and would be adopted if its job existed.
        b.adoptResult = true;
        b.reapResult = true;
      },
    });
    expect(await h2.manager.recover(60_000)).toEqual({ adopted: 0, reclaimed: 1, dropped: 0 });
    expect(h2.backend('local').reaps.map((r) => r.agentId)).toEqual([req!.agentId]);
    await h2.d.recover();
    expect(await h2.jobState(jobId)).toBeUndefined();
    expect(h2.d.queue.size).toBe(0);
    expect(h2.manager.entries()).toEqual([]);
    expect(await h2.spawnRows()).toEqual([]);
    expect(h2.manager.capBook().count()).toBe(0);
    expect(await h2.registerAgent(req!.agentId, { token: spawnToken(req!) })).toMatchObject({ ok: false });
  });

  it("holds the run's insert until the backend has asked for the agent's start", async () => {
    const h = await hs.make({
      config: { version: 1, scalers: [bareMetal('local', [['linux']])] },
      configureBackend: (b) => {
        provisional(b);
        b.recordOnSpawn = false; // the test asks for the record itself
      },
    });
    const early = new EarlyProvision({
      queue: h.d.queue,
      registry: h.d.registry,
      scaler: h.manager,
      clock: h.clock,
      log: pino({ level: 'silent' }),
      clustered: false,
      halted: () => false,
      passing: () => false,
      launchWaitMs: 600_000, // only the ask ends this wait here
    });
    const job: QueuedJob = {
      id: 'j-early',
      runId: 'r-early',
      name: 'a',
      seq: 0,
      runsOn: ['linux'],
      spec: { role: 'execution' },
      createdAtMs: h.clock.now(),
    };
    let done = false;
    const asked = early.provision([job]).finally(() => (done = true));
    await h.settle();
    const [req] = h.allSpawns();
    expect(req?.boundJobId).toBe('j-early');
    // The backend is starting the agent and has not asked for its record: the caller still waits.
    expect(done).toBe(false);
    await req!.record!();
    expect(await asked).toEqual([{ jobId: 'j-early', agentId: req!.agentId, scalerName: 'local' }]);
  });

  it('keeps what its spawn reports until the job is stored: a start that failed first still shows on the job', async () => {
    const { h, ctl } = await harness();
    let atInsert: { events: number; failed: number } | undefined;
    ctl.before = async () => {
      const [req] = h.allSpawns();
      const b = h.backend('local');
      b.emit(req!.agentId, 'scaler.provisioning', 'starting the agent');
      b.failSpawn(req!.agentId, new SpawnError('config', 'the agent binary is gone'));
      await h.settle();
      atInsert = { events: h.hooks.jobEvents.length, failed: h.hooks.spawnFailed.length };
    };
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    // Nothing was told of a job the queue and the store did not hold yet.
    expect(atInsert).toEqual({ events: 0, failed: 0 });
    expect(h.hooks.jobEvents).toEqual([
      { jobId: ids[0], type: 'scaler.provisioning', detail: 'starting the agent' },
    ]);
    expect(h.hooks.spawnFailed.map((f) => [f.jobId, f.error.kind])).toEqual([[ids[0], 'config']]);
    // Told once the job was stored: the failure is on its row, where the API shows it.
    expect((await h.store.jobs.get(ids[0]!))?.last_provisioning_error).toBe(
      'config: the agent binary is gone',
    );
  });

  it('drops what its spawn reported when the run is not stored', async () => {
    const { h, ctl } = await harness();
    ctl.fail = true;
    ctl.before = async () => {
      const [req] = h.allSpawns();
      h.backend('local').emit(req!.agentId, 'scaler.provisioning', 'starting the agent');
      await h.settle();
    };
    await expect(h.submit({ a: { runsOn: ['linux'] } })).rejects.toThrow('the disk refused the run');
    await h.settle();
    expect(h.hooks.jobEvents).toEqual([]);
  });
});
