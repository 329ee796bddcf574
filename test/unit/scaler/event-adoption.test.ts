/**
 * Cross-instance adoption of event agents on the real embedded store: two or more ScalerManagers
 * with their own instance ids share one PGlite database, as orchestrators share PostgreSQL
 * (test/system/event-adoption-handover.test.ts and event-adoption-race.test.ts run the same across
 * processes).
 */
import fc from 'fast-check';
import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import type { ScalerConfig } from '../../../src/config/index.js';
import { EventScalerBackend } from '../../../src/scaler/backends/event/backend.js';
import { EventProvisionReaper } from '../../../src/scaler/event-reaper.js';
import {
  RegistrationRefused,
  ScalerAdoptionLookupError,
  ScalerManager,
} from '../../../src/scaler/manager.js';
import { EventMetrics } from '../../../src/server/event-metrics.js';
import { AdoptionRepo } from '../../../src/store/adoption-repo.js';
import type { Store } from '../../../src/store/index.js';
import { ManualClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';
import { CountingEmitter, eventEntry, FakeClaims, silent } from '../../helpers/event-backend.js';
import { scalerConfig } from '../../helpers/scaler-config.js';

let open: Awaited<ReturnType<typeof freshStore>> | undefined;
afterEach(async () => {
  await open?.close();
  open = undefined;
});

const A_TARGETS = ['webhook:http://127.0.0.1:1/from-a'];

/** A spawn row as the spawner writes it (owner, gate and targets recorded at spawn). */
async function insertRow(
  store: Store,
  agentId: string,
  over: { backendType?: string; owner?: string; gate?: string[]; boundJobId?: string | null } = {},
) {
  await store.db
    .insertInto('scaler_spawning_agents')
    .values({
      agent_id: agentId,
      scaler_name: 'cloud',
      backend_type: over.backendType ?? 'event',
      // What the spawn records for today's backends: of them only the event backend is peer-adoptable.
      peer_adoptable: (over.backendType ?? 'event') === 'event',
      label_set: JSON.stringify(['cloud', 'linux']),
      run_id: null,
      bound_job_id: over.boundJobId ?? null,
      owner_instance_id: over.owner ?? 'orch-a',
      backend_ref: agentId,
      mandatory_labels: JSON.stringify(over.gate ?? ['secure']),
      provisioning_targets: JSON.stringify(A_TARGETS),
      spawned_at: new Date(),
    })
    .execute();
}

function emptyConfig(): ScalerConfig {
  return scalerConfig({ version: 1, scalers: [] });
}

/** One orchestrator's manager: `cloud` configured (with its own targets) or not at all. */
function manager(store: Store, instanceId: string, opts: { configured: boolean; clock?: ManualClock }) {
  const emitter = new CountingEmitter();
  const clock = opts.clock ?? new ManualClock(1_000_000);
  const entry = eventEntry({
    provisioningTargets: [`webhook:http://127.0.0.1:1/from-${instanceId}`],
    mandatoryLabels: [],
  });
  const backends = opts.configured
    ? [
        new EventScalerBackend({
          entry,
          emitter,
          claimStore: new FakeClaims(),
          requestId: () => 'req',
          logger: silent,
          now: () => clock.now(),
        }),
      ]
    : [];
  const config = opts.configured ? ({ ...emptyConfig(), scalers: [entry] } as ScalerConfig) : emptyConfig();
  const m = new ScalerManager({
    config,
    backends,
    store,
    clock,
    logger: silent,
    instanceId,
    orchestratorUrlFor: () => 'ws://127.0.0.1:1/ws',
    scaleEvents: emitter,
    spawnTimeoutMs: 10_000,
  });
  return { m, emitter, clock };
}

describe('adoptSpawningAgent: one conditional update', () => {
  it('property: of N concurrent adopters exactly one wins; the winner may adopt again, the others never', async () => {
    open = await freshStore();
    const repo = new AdoptionRepo(open.store.db);
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2, max: 6 }),
        fc.array(fc.nat({ max: 5 }), { minLength: 1, maxLength: 8 }),
        async (adopters, retries) => {
          const id = `scaler-event-p${++n}`;
          await insertRow(open!.store, id);
          const names = Array.from({ length: adopters }, (_, i) => `orch-${i}`);
          const first = await Promise.all(names.map((who) => repo.adoptSpawningAgent(id, who, new Date())));
          const winners = names.filter((_, i) => first[i] !== null);
          expect(winners).toHaveLength(1);
          // Any later attempts, in any order: only the winner gets the row again.
          const later = await Promise.all(
            retries.map((r) => repo.adoptSpawningAgent(id, names[r % adopters]!, new Date())),
          );
          retries.forEach((r, i) =>
            expect(later[i] !== null, `retry by ${names[r % adopters]}`).toBe(
              names[r % adopters] === winners[0],
            ),
          );
          const row = await open!.store.db
            .selectFrom('scaler_spawning_agents')
            .select('adopted_by')
            .where('agent_id', '=', id)
            .executeTakeFirstOrThrow();
          const outcome = await open!.store.db
            .selectFrom('scaler_provision_outcomes')
            .select('adopted_by')
            .where('agent_id', '=', id)
            .executeTakeFirstOrThrow();
          expect(row.adopted_by).toBe(winners[0]);
          expect(outcome.adopted_by).toBe(winners[0]);
        },
      ),
      { numRuns: 25 },
    );
  });

  it('a re-adoption by the same instance says the agent registered before (no bound job again)', async () => {
    open = await freshStore();
    const repo = new AdoptionRepo(open.store.db);
    await insertRow(open.store, 'scaler-event-again001', { boundJobId: 'j-1' });
    const one = await repo.adoptSpawningAgent('scaler-event-again001', 'orch-b', new Date(1_000));
    const two = await repo.adoptSpawningAgent('scaler-event-again001', 'orch-b', new Date(2_000));
    expect(one).toMatchObject({ boundJobId: 'j-1', registeredBefore: false, provisioningTargets: A_TARGETS });
    expect(two).toMatchObject({ registeredBefore: true });
  });

  it('local-backend rows never match, whoever asks', async () => {
    open = await freshStore();
    const repo = new AdoptionRepo(open.store.db);
    for (const t of ['bare-metal', 'container', 'firecracker']) {
      await insertRow(open.store, `scaler-${t}-local001`, { backendType: t });
      expect(await repo.adoptSpawningAgent(`scaler-${t}-local001`, 'orch-b', new Date())).toBeNull();
      expect(await repo.adoptSpawningAgent(`scaler-${t}-local001`, 'orch-a', new Date())).toBeNull();
    }
  });
});

describe('registration through adoption (ScalerManager)', () => {
  it("stamps the row's gate, not this instance's config, and hands over the bound job", async () => {
    open = await freshStore();
    await insertRow(open.store, 'scaler-event-gate0001', {
      gate: ['secure', 'kici:platform:x'],
      boundJobId: 'j-9',
    });
    const b = manager(open.store, 'orch-b', { configured: true });
    const res = await b.m.registerAgent('scaler-event-gate0001');
    expect(res).toMatchObject({
      scalerName: 'cloud',
      gate: ['secure', 'kici:platform:x'],
      boundJobId: 'j-9',
    });
    // Configured here: in the manager's index, registered, counted against this instance's caps.
    expect(b.m.state.agents.get('scaler-event-gate0001')?.phase).toBe('registered');
    const c = manager(open.store, 'orch-c', { configured: false });
    await insertRow(open.store, 'scaler-event-gate0002', { gate: ['gpu-only'] });
    expect(await c.m.registerAgent('scaler-event-gate0002')).toMatchObject({
      gate: ['gpu-only'],
      warm: true,
    });
  });

  it('a second instance is refused, naming the adopter; the adopter may register the agent again', async () => {
    open = await freshStore();
    await insertRow(open.store, 'scaler-event-twice001');
    const b = manager(open.store, 'orch-b', { configured: false });
    const c = manager(open.store, 'orch-c', { configured: true });
    await b.m.registerAgent('scaler-event-twice001');
    await expect(c.m.registerAgent('scaler-event-twice001')).rejects.toThrow(
      /already adopted by orchestrator "orch-b"/,
    );
    expect(c.m.state.agents.has('scaler-event-twice001')).toBe(false);
    await expect(b.m.registerAgent('scaler-event-twice001')).resolves.toMatchObject({ scalerName: 'cloud' });
  });

  it('a local-backend agent reaching another instance is refused and its row left alone', async () => {
    open = await freshStore();
    await insertRow(open.store, 'scaler-bare-metal-wrong001', { backendType: 'bare-metal' });
    const b = manager(open.store, 'orch-b', { configured: true });
    const err = await b.m.registerAgent('scaler-bare-metal-wrong001').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RegistrationRefused);
    expect(String(err)).toMatch(/spawned by orchestrator "orch-a" on its own host \(bare-metal backend\)/);
    const row = await open.store.db
      .selectFrom('scaler_spawning_agents')
      .selectAll()
      .where('agent_id', '=', 'scaler-bare-metal-wrong001')
      .executeTakeFirstOrThrow();
    expect(row.adopted_by).toBeNull();
    expect(row.registered_at).toBeNull();
    await expect(b.m.registerAgent('scaler-event-nosuch001')).rejects.toThrow(/no spawn record/);
  });

  it('a store error during the lookup refuses with ScalerAdoptionLookupError and counts it', async () => {
    open = await freshStore();
    await insertRow(open.store, 'scaler-event-dbfail01');
    // A real failure of the conditional update, raised by the database.
    await sql`create function kici_test_fail() returns trigger language plpgsql as $$
      begin raise exception 'disk on fire'; end $$`.execute(open.store.db);
    await sql`create trigger kici_test_fail before update on scaler_spawning_agents
      for each row execute function kici_test_fail()`.execute(open.store.db);
    const b = manager(open.store, 'orch-b', { configured: false });
    const err = await b.m.registerAgent('scaler-event-dbfail01').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ScalerAdoptionLookupError);
    expect(err).not.toBeInstanceOf(RegistrationRefused);
    expect(b.m.adoptionLookupFailures).toBe(1);
    // The scrape copies the manager's count.
    const registry = new Registry();
    new EventMetrics(
      registry,
      () => [],
      () => b.m.adoptionLookupFailures,
    );
    expect(await registry.metrics()).toMatch(/^kici_orch_scaler_adoption_lookup_failures_total 1$/m);
    expect(b.m.adoption.has('scaler-event-dbfail01')).toBe(false);
  });
});

describe('teardown by the adopter', () => {
  it('without the scaler configured: the scale-down goes to the targets recorded at spawn, and the row goes', async () => {
    open = await freshStore();
    await insertRow(open.store, 'scaler-event-down0001');
    const b = manager(open.store, 'orch-b', { configured: false });
    await b.m.registerAgent('scaler-event-down0001');
    await b.m.onAgentDisconnected('scaler-event-down0001');
    const downs = b.emitter.downs('scaler-event-down0001');
    expect(downs).toHaveLength(1);
    expect(downs[0]).toMatchObject({
      targets: A_TARGETS,
      payload: { scalerName: 'cloud', reason: 'job-complete' },
    });
    const rows = await open.store.db.selectFrom('scaler_spawning_agents').selectAll().execute();
    expect(rows).toHaveLength(0);
    // The outcome outlives the row: the spawner can still tell it was adopted.
    const adopters = await b.m.adoption.adopters(['scaler-event-down0001']);
    expect(adopters.get('scaler-event-down0001')).toBe('orch-b');
    // A repeated disconnect emits nothing more.
    await b.m.onAgentDisconnected('scaler-event-down0001');
    expect(b.emitter.downs('scaler-event-down0001')).toHaveLength(1);
  });

  it('with the scaler configured (other targets here): still the recorded targets', async () => {
    open = await freshStore();
    await insertRow(open.store, 'scaler-event-down0002');
    const b = manager(open.store, 'orch-b', { configured: true });
    await b.m.registerAgent('scaler-event-down0002');
    await b.m.onAgentDisconnected('scaler-event-down0002', 'heartbeat-timeout');
    const downs = b.emitter.downs('scaler-event-down0002');
    expect(downs).toHaveLength(1);
    expect(downs[0]).toMatchObject({ targets: A_TARGETS, payload: { reason: 'heartbeat-timeout' } });
    expect(b.m.state.agents.size).toBe(0);
  });
});

describe('restart recovery', () => {
  it('a restarted spawner leaves rows a peer adopted alone; its own and unadopted rows are still its own', async () => {
    open = await freshStore();
    await insertRow(open.store, 'scaler-event-rec00001');
    await insertRow(open.store, 'scaler-event-rec00002');
    await insertRow(open.store, 'scaler-event-rec00003');
    const repo = new AdoptionRepo(open.store.db);
    await repo.adoptSpawningAgent('scaler-event-rec00002', 'orch-b', new Date());
    await repo.adoptSpawningAgent('scaler-event-rec00003', 'orch-a', new Date());
    const owned = (await open.store.spawns.listOwned('orch-a')).map((r) => r.agent_id).sort();
    expect(owned).toEqual(['scaler-event-rec00001', 'scaler-event-rec00003']);
    // Recovery on A neither adopts B's agent nor deletes B's row (B answers for its teardown).
    const a = manager(open.store, 'orch-a', { configured: true });
    await a.m.recover(60_000);
    expect(a.m.state.agents.has('scaler-event-rec00002')).toBe(false);
    const left = await open.store.db
      .selectFrom('scaler_spawning_agents')
      .select('agent_id')
      .where('agent_id', '=', 'scaler-event-rec00002')
      .execute();
    expect(left).toHaveLength(1);
    expect(a.emitter.downs('scaler-event-rec00002')).toHaveLength(0);
  });
});

describe("the spawner's stale prune", () => {
  async function spawnOnA(store: Store, clock: ManualClock) {
    const a = manager(store, 'orch-a', { configured: true, clock });
    await store.db.insertInto('runs').values({ id: 'r-1', name: 'r' }).execute();
    const res = await a.m.provision(a.m.route({ runsOn: ['cloud', 'linux'] })!, {
      requests: { cpus: 0, memBytes: 0 },
      limits: { cpus: 0, memBytes: 0 },
    });
    expect(res.action).toBe('spawning');
    const agentId = (res as { agentId: string }).agentId;
    await eventuallyPhase(a.m, agentId, 'starting');
    const reaper = new EventProvisionReaper({
      db: store.db,
      engine: 'pglite',
      manager: a.m,
      instanceId: 'orch-a',
      clock,
      logger: silent,
      spawnTimeoutMs: 10_000,
      intervalMs: 60_000,
      windows: { flapGraceMs: 0 },
    });
    return { a, agentId, reaper };
  }

  for (const after of ['while the adopter holds it', 'after the adopter tore it down'] as const) {
    it(`forgets a provision a peer adopted, ${after}: no failure, no backoff, no scale-down`, async () => {
      open = await freshStore();
      const clock = new ManualClock(1_000_000);
      const { a, agentId, reaper } = await spawnOnA(open.store, clock);
      const b = manager(open.store, 'orch-b', { configured: false });
      await b.m.registerAgent(agentId);
      if (after === 'after the adopter tore it down') await b.m.onAgentDisconnected(agentId);
      clock.advance(11_000);
      await reaper.tick();
      expect(a.m.state.agents.has(agentId)).toBe(false);
      expect(a.m.failures.records()).toHaveLength(0);
      expect(a.m.backoff.snapshot()).toEqual([]);
      expect(a.emitter.downs(agentId)).toHaveLength(0);
      expect(b.emitter.downs(agentId)).toHaveLength(after === 'after the adopter tore it down' ? 1 : 0);
      expect(reaper.reaped).toBe(0);
    });
  }

  it('control: a provision nobody adopted is still a failed provision', async () => {
    open = await freshStore();
    const clock = new ManualClock(1_000_000);
    const { a, agentId, reaper } = await spawnOnA(open.store, clock);
    clock.advance(11_000);
    // The first pass starts its absence clock; the next one, past the (zero) flap grace, reaps it.
    await reaper.tick();
    expect(a.emitter.downs(agentId)).toHaveLength(0);
    await reaper.tick();
    expect(a.m.state.agents.has(agentId)).toBe(false);
    expect(a.m.failures.records()).toHaveLength(1);
    expect(a.emitter.downs(agentId)).toHaveLength(1);
  });
});

async function eventuallyPhase(m: ScalerManager, agentId: string, phase: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (m.state.agents.get(agentId)?.phase === phase) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`${agentId} never reached ${phase}`);
}
