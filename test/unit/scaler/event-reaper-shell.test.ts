/**
 * The reaper's shell on a real (embedded) store: instances' heartbeat rows and agents rows decide
 * what it sees; the scale-down goes to the targets recorded at spawn even where the scaler is not
 * configured; the verdict is recorded; a failed scale-down waits for the re-attempt throttle.
 */
import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { scalerConfig } from '../../helpers/scaler-config.js';
import { InstancesRepo } from '../../../src/cluster/instances-repo.js';
import { EventProvisionReaper } from '../../../src/scaler/event-reaper.js';
import { ScalerManager } from '../../../src/scaler/manager.js';
import type { ScalerScaleDownPayload } from '../../../src/scaler/events/payloads.js';
import type { Store } from '../../../src/store/index.js';
import { ManualClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';
import { CountingEmitter, silent } from '../../helpers/event-backend.js';

let open: Awaited<ReturnType<typeof freshStore>> | undefined;
afterEach(async () => {
  await open?.close();
  open = undefined;
});

const TARGETS = ['webhook:http://127.0.0.1:1/from-c'];
const GRACE = 1_000;

/** A scale-down emitter that can be made to fail. */
class FlakyEmitter extends CountingEmitter {
  failDown = false;
  override async emitScalerScaleDown(payload: ScalerScaleDownPayload, targets: string[]): Promise<string> {
    if (this.failDown) throw new Error('router down');
    return super.emitScalerScaleDown(payload, targets);
  }
}

async function instance(store: Store, id: string, silentForMs: number) {
  await new InstancesRepo(store.db).beat(
    {
      id,
      address: 'http://x',
      version: 't',
      heartbeatMs: 100,
      agentsConnected: 0,
      jobsRunning: 0,
      leader: false,
    },
    true,
  );
  await store.db
    .updateTable('kici_instances')
    .set({ last_heartbeat: sql<Date>`now() - ${silentForMs} * interval '1 millisecond'` })
    .where('id', '=', id)
    .execute();
}

/** A registered event agent provisioned by orch-c, its agents row connected on `on`. */
async function registeredAgent(store: Store, agentId: string, on: string) {
  await store.db
    .insertInto('scaler_spawning_agents')
    .values({
      agent_id: agentId,
      scaler_name: 'cloud',
      backend_type: 'event',
      peer_adoptable: true,
      label_set: JSON.stringify(['cloud']),
      run_id: null,
      bound_job_id: null,
      owner_instance_id: 'orch-c',
      backend_ref: agentId,
      mandatory_labels: '[]',
      provisioning_targets: JSON.stringify(TARGETS),
      spawned_at: new Date(),
      registered_at: new Date(),
    })
    .execute();
  await store.db
    .insertInto('agents')
    .values({
      id: agentId,
      kind: 'scaler',
      labels: JSON.stringify(['cloud']),
      scaler_name: 'cloud',
      state: 'connected',
      hostname: null,
      version: null,
      connected_at: new Date(),
      last_seen_at: new Date(),
      disconnected_at: null,
      instance_id: on,
    })
    .execute();
}

/** The leader orch-a, which does not configure the scaler at all. */
function leader(store: Store) {
  const emitter = new FlakyEmitter();
  const clock = new ManualClock(1_000_000);
  const m = new ScalerManager({
    config: scalerConfig({ version: 1, scalers: [] }),
    backends: [],
    store,
    clock,
    logger: silent,
    instanceId: 'orch-a',
    orchestratorUrlFor: () => 'ws://127.0.0.1:1/ws',
    scaleEvents: emitter,
    spawnTimeoutMs: 10_000,
  });
  const reaper = new EventProvisionReaper({
    db: store.db,
    engine: 'pglite',
    manager: m,
    instanceId: 'orch-a',
    clock,
    logger: silent,
    spawnTimeoutMs: 10_000,
    intervalMs: 60_000,
    windows: { flapGraceMs: GRACE, reattemptIntervalMs: 5_000 },
  });
  return { emitter, clock, reaper };
}

describe('the event reaper on a store', () => {
  it('a registered agent of a dead instance: one heartbeat-timeout scale-down to its recorded targets after the grace', async () => {
    open = await freshStore();
    const { store } = open;
    await instance(store, 'orch-b', 0);
    await instance(store, 'orch-c', 60_000);
    await registeredAgent(store, 'scaler-event-dead0001', 'orch-c');
    const { emitter, clock, reaper } = leader(store);
    await reaper.tick();
    expect(emitter.downs()).toHaveLength(0);
    clock.advance(GRACE - 1);
    await reaper.tick();
    expect(emitter.downs()).toHaveLength(0);
    expect(reaper.unseenProvisions).toBe(0);
    clock.advance(1);
    await reaper.tick();
    expect(emitter.downs()).toEqual([
      {
        kind: 'down',
        payload: expect.objectContaining({ agentId: 'scaler-event-dead0001', reason: 'heartbeat-timeout' }),
        targets: TARGETS,
      },
    ]);
    const outcome = await store.db
      .selectFrom('scaler_provision_outcomes')
      .selectAll()
      .where('agent_id', '=', 'scaler-event-dead0001')
      .executeTakeFirstOrThrow();
    expect(outcome).toMatchObject({
      condemned_by: 'orch-a',
      condemned_reason: 'heartbeat-timeout',
      reap_attempts: 1,
    });
    expect(await store.db.selectFrom('scaler_spawning_agents').select('agent_id').execute()).toEqual([]);
    clock.advance(10 * GRACE);
    await reaper.tick();
    expect(emitter.downs()).toHaveLength(1);
    expect(reaper.reaped).toBe(1);
  });

  it('an agent connected on a live peer is never reaped, however long', async () => {
    open = await freshStore();
    const { store } = open;
    await instance(store, 'orch-b', 0);
    await registeredAgent(store, 'scaler-event-live0001', 'orch-b');
    const { emitter, clock, reaper } = leader(store);
    for (let i = 0; i < 4; i++) {
      await reaper.tick();
      clock.advance(10 * GRACE);
    }
    expect(emitter.downs()).toHaveLength(0);
  });

  it('seeing none of its known peers: blocked, nothing reaped; a failed scale-down waits for the throttle', async () => {
    open = await freshStore();
    const { store } = open;
    await instance(store, 'orch-b', 0);
    await instance(store, 'orch-c', 60_000);
    await registeredAgent(store, 'scaler-event-cut00001', 'orch-c');
    const { emitter, clock, reaper } = leader(store);
    await reaper.tick(); // meets orch-b; starts the clock
    await instance(store, 'orch-b', 60_000);
    clock.advance(10 * GRACE);
    await reaper.tick();
    expect(reaper.blocked).toBe(true);
    await reaper.tick();
    expect(emitter.downs()).toHaveLength(0);
    // orch-b answers again: the clock starts afresh; the first attempt fails.
    await instance(store, 'orch-b', 0);
    emitter.failDown = true;
    await reaper.tick();
    expect(reaper.blocked).toBe(false);
    clock.advance(GRACE);
    await reaper.tick();
    expect(emitter.downs()).toHaveLength(0);
    emitter.failDown = false;
    clock.advance(4_000);
    await reaper.tick();
    expect(emitter.downs()).toHaveLength(0);
    clock.advance(1_000);
    await reaper.tick();
    expect(emitter.downs('scaler-event-cut00001')).toHaveLength(1);
  });
});
