/**
 * A spawn row says whether its agent may be adopted by a peer (`peer_adoptable`, migration
 * 031_spawn_peer_adoptable), and the store asks that, not the backend's type name: the cluster
 * cap counts such rows, adoption takes only them, the refusal is told the flag, and the reaper
 * reads only them. A store written before the column existed gets it from `backend_type`, so event
 * provisions in flight across the upgrade keep being counted, adopted and reaped.
 */
import { PGlite } from '@electric-sql/pglite';
import { Kysely, Migrator, sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { RegistrationRefused, ScalerManager } from '../../../src/scaler/manager.js';
import { readReapSnapshot } from '../../../src/scaler/reap-view.js';
import { AdoptionRepo } from '../../../src/store/adoption-repo.js';
import { migrateToLatest } from '../../../src/store/migrations.js';
import { clusterMigrations } from '../../../src/store/migrations/cluster.js';
import { coreMigrations } from '../../../src/store/migrations/core.js';
import { laterMigrations } from '../../../src/store/migrations/later.js';
import { PGliteDialect } from '../../../src/store/pglite-dialect.js';
import { withScalerCapLock } from '../../../src/store/scaler-cap-lock.js';
import type { Database } from '../../../src/store/schema.js';
import type { SpawnRecord } from '../../../src/store/spawns-repo.js';
import { ManualClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';
import { CountingEmitter, silent } from '../../helpers/event-backend.js';
import { scalerConfig } from '../../helpers/scaler-config.js';

let open: Awaited<ReturnType<typeof freshStore>> | undefined;
afterEach(async () => {
  await open?.close();
  open = undefined;
});

describe('migration 031_spawn_peer_adoptable', () => {
  it('sets the flag of the rows already written from their backend type', async () => {
    // A store at the schema of the version before: every migration up to 030, none after.
    const db = new Kysely<Database>({ dialect: new PGliteDialect(new PGlite()) });
    try {
      const all = { ...coreMigrations, ...clusterMigrations, ...laterMigrations };
      const before = new Migrator({
        db,
        provider: { getMigrations: async () => all },
        migrationTableName: 'kici_migrations',
        migrationLockTableName: 'kici_migrations_lock',
      });
      const { error } = await before.migrateTo('030_queued');
      expect(error).toBeUndefined();
      await sql`
        insert into scaler_spawning_agents
          (agent_id, scaler_name, backend_type, label_set, owner_instance_id, mandatory_labels,
           provisioning_targets, spawned_at)
        values
          ('scaler-event-inflight1', 'cloud', 'event', '["cloud"]', 'orch-a', '[]',
           '["webhook:http://127.0.0.1:1/x"]', now()),
          ('scaler-bare-metal-old1', 'local', 'bare-metal', '["linux"]', 'orch-a', '[]', null, now())`.execute(
        db,
      );

      await migrateToLatest(db as Kysely<unknown>);

      const rows = await db
        .selectFrom('scaler_spawning_agents')
        .select(['agent_id', 'peer_adoptable'])
        .orderBy('agent_id')
        .execute();
      expect(rows).toEqual([
        { agent_id: 'scaler-bare-metal-old1', peer_adoptable: false },
        { agent_id: 'scaler-event-inflight1', peer_adoptable: true },
      ]);
      // The in-flight event provision is still counted, adoptable and watched by the reaper.
      expect(await withScalerCapLock(db, 'cloud', async (l) => l.clusterActiveCount)).toBe(1);
      const snap = await readReapSnapshot(db, 'orch-b', Date.now(), () => false);
      expect(snap.rows.map((r) => r.agentId)).toEqual(['scaler-event-inflight1']);
      const adopted = await new AdoptionRepo(db).adoptSpawningAgent(
        'scaler-event-inflight1',
        'orch-b',
        new Date(),
      );
      expect(adopted?.provisioningTargets).toEqual(['webhook:http://127.0.0.1:1/x']);
    } finally {
      await db.destroy();
    }
  }, 60_000);
});

/** A spawn whose type name and recorded capability disagree with the old `type = 'event'` rule. */
const spawn = (agentId: string, backendType: string, peerAdoptable: boolean): SpawnRecord => ({
  agentId,
  scalerName: 'mixed',
  backendType,
  peerAdoptable,
  labelSet: ['linux'],
  runId: null,
  boundJobId: null,
  ownerInstanceId: 'orch-a',
  mandatoryLabels: [],
  spawnedAt: new Date(),
});
const none = { cpus: 0, memBytes: 0 };
const SHARED = ['scaler-bare-metal-shared01', 'scaler-bare-metal-shared02'];
const PINNED = 'scaler-bare-metal-pinned01';
/** An event row as an orchestrator from before the column writes it: the flag at its default. */
const OLDER_WRITER = 'scaler-event-olderwriter1';

async function mixedStore() {
  open = await freshStore();
  for (const id of SHARED) await open.store.spawns.insertSpawn(spawn(id, 'bare-metal', true), none);
  await open.store.spawns.insertSpawn(spawn(PINNED, 'bare-metal', false), none);
  await open.store.spawns.insertSpawn(spawn(OLDER_WRITER, 'event', false), none);
  return open.store.db;
}

describe('the store asks the recorded capability, not the type name', () => {
  it("the cluster cap counts the peer-adoptable rows, and an older writer's event row", async () => {
    const db = await mixedStore();
    // By type name alone this would be 1 (the event row); by the flag alone, 2.
    expect(await withScalerCapLock(db, 'mixed', async (l) => l.clusterActiveCount)).toBe(3);
  });

  it('a peer adopts a peer-adoptable row whatever its type; a pinned row is refused with the flag', async () => {
    const db = await mixedStore();
    const repo = new AdoptionRepo(db);
    expect(await repo.adoptSpawningAgent(SHARED[0]!, 'orch-b', new Date())).toMatchObject({
      agentId: SHARED[0],
      ownerInstanceId: 'orch-a',
    });
    expect(await repo.adoptSpawningAgent(OLDER_WRITER, 'orch-b', new Date())).toMatchObject({
      agentId: OLDER_WRITER,
    });
    expect(await repo.adoptSpawningAgent(PINNED, 'orch-b', new Date())).toBeNull();
    expect(await repo.describe(PINNED)).toEqual({
      backendType: 'bare-metal',
      peerAdoptable: false,
      ownerInstanceId: 'orch-a',
      adoptedBy: null,
    });
    expect(await repo.describe(OLDER_WRITER)).toMatchObject({ backendType: 'event', peerAdoptable: true });
    const row = await db
      .selectFrom('scaler_spawning_agents')
      .select('adopted_by')
      .where('agent_id', '=', PINNED)
      .executeTakeFirstOrThrow();
    expect(row.adopted_by).toBeNull();
    // The agent reaching a peer is told its compute is pinned to its spawner, not that it was adopted.
    const peer = new ScalerManager({
      config: scalerConfig({ version: 1, scalers: [] }),
      backends: [],
      store: open!.store,
      clock: new ManualClock(1_000_000),
      logger: silent,
      instanceId: 'orch-b',
      orchestratorUrlFor: () => 'ws://127.0.0.1:1/ws',
      scaleEvents: new CountingEmitter(),
      spawnTimeoutMs: 10_000,
    });
    const err = await peer.registerAgent(PINNED).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RegistrationRefused);
    expect(String(err)).toMatch(/spawned by orchestrator "orch-a" on its own host \(bare-metal backend\)/);
  });

  it("the reaper reads the peer-adoptable rows, and an older writer's event row", async () => {
    const db = await mixedStore();
    const snap = await readReapSnapshot(db, 'orch-b', Date.now(), () => false);
    expect(snap.rows.map((r) => r.agentId).sort()).toEqual([...SHARED, OLDER_WRITER].sort());
  });
});
