import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../../src/store/index.js';
import type { SpawnRecord } from '../../../src/store/spawns-repo.js';
import { newToken } from '../../../src/store/tokens-repo.js';
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
const GiB = 1024 ** 3;

function spawn(extra: Partial<SpawnRecord> = {}): SpawnRecord {
  return {
    agentId: uid('scaler-event'),
    scalerName: 'pool',
    backendType: 'event',
    peerAdoptable: true,
    labelSet: ['gpu', 'linux'],
    runId: 'r1',
    boundJobId: uid('job'),
    ownerInstanceId: 'inst-a',
    mandatoryLabels: ['gpu'],
    spawnedAt: T0,
    ...extra,
  };
}

const spawnRow = (agentId: string) =>
  store.db
    .selectFrom('scaler_spawning_agents')
    .selectAll()
    .where('agent_id', '=', agentId)
    .executeTakeFirst();
const reservationRow = (agentId: string) =>
  store.db.selectFrom('scaler_reservations').selectAll().where('agent_id', '=', agentId).executeTakeFirst();

describe('SpawnsRepo.insertSpawn', () => {
  it('writes the spawn record and its reservation', async () => {
    const rec = spawn();
    await store.spawns.insertSpawn(rec, { cpus: 1.5, memBytes: 3 * GiB });
    expect(await spawnRow(rec.agentId)).toMatchObject({
      agent_id: rec.agentId,
      scaler_name: 'pool',
      backend_type: 'event',
      peer_adoptable: true,
      label_set: ['gpu', 'linux'],
      run_id: 'r1',
      bound_job_id: rec.boundJobId,
      owner_instance_id: 'inst-a',
      backend_ref: null,
      mandatory_labels: ['gpu'],
      registered_at: null,
    });
    const res = (await reservationRow(rec.agentId))!;
    expect(res).toMatchObject({ scaler_name: 'pool', cpu_units: 1.5, owner_instance_id: 'inst-a' });
    // bigint column: memory beyond 2^31 survives the round trip.
    expect(Number(res.mem_bytes)).toBe(3 * GiB);
    expect(res.reserved_at.getTime()).toBe(T0.getTime());
  });

  it('writes neither row when the reservation cannot be written', async () => {
    const rec = spawn();
    // A stale reservation under the same id makes the second insert of the transaction fail.
    await store.db
      .insertInto('scaler_reservations')
      .values({
        agent_id: rec.agentId,
        scaler_name: 'pool',
        cpu_units: 0,
        mem_bytes: 0,
        owner_instance_id: 'old',
        reserved_at: T0,
      })
      .execute();
    await expect(store.spawns.insertSpawn(rec, { cpus: 1, memBytes: GiB })).rejects.toThrow();
    expect(await spawnRow(rec.agentId)).toBeUndefined();
    expect((await reservationRow(rec.agentId))!.owner_instance_id).toBe('old');
  });

  it('refuses a second spawn under the same agent id without touching the first', async () => {
    const rec = spawn();
    await store.spawns.insertSpawn(rec, { cpus: 1, memBytes: GiB });
    await expect(
      store.spawns.insertSpawn({ ...rec, scalerName: 'other' }, { cpus: 9, memBytes: 9 * GiB }),
    ).rejects.toThrow();
    expect((await spawnRow(rec.agentId))!.scaler_name).toBe('pool');
    expect((await reservationRow(rec.agentId))!.cpu_units).toBe(1);
  });
});

describe('SpawnsRepo.insertSpawnAndToken', () => {
  const tokenRows = (agentId: string) =>
    store.db.selectFrom('agent_tokens').select('agent_id').where('agent_id', '=', agentId).execute();

  it('stores the spawn record, its reservation, its decision time and the token in one statement', async () => {
    const rec = spawn();
    const minted = newToken({
      agentId: rec.agentId,
      labels: ['gpu'],
      kind: 'ephemeral',
      ttlMs: 60_000,
      now: T0,
    });
    await store.spawns.insertSpawnAndToken(rec, { cpus: 1, memBytes: GiB }, minted.row);
    expect(await spawnRow(rec.agentId)).toBeDefined();
    expect(await reservationRow(rec.agentId)).toMatchObject({ cpu_units: 1 });
    const times = await store.db
      .selectFrom('scaler_spawn_times')
      .select('decided_at')
      .where('agent_id', '=', rec.agentId)
      .executeTakeFirst();
    expect(times?.decided_at.getTime()).toBe(rec.spawnedAt.getTime());
    expect(await tokenRows(rec.agentId)).toHaveLength(1);
    const check = await store.tokens.check(minted.token, T0);
    expect(check).toMatchObject({ ok: true, agentId: rec.agentId, kind: 'ephemeral' });
  });

  it('leaves neither the record nor its reservation when the token cannot be stored', async () => {
    const first = spawn();
    const clash = newToken({ agentId: first.agentId, labels: [], kind: 'ephemeral', now: T0 });
    await store.spawns.insertSpawnAndToken(first, { cpus: 1, memBytes: GiB }, clash.row);
    // The same token id again: the token's insert fails, and with it the whole statement.
    const rec = spawn();
    await expect(
      store.spawns.insertSpawnAndToken(
        rec,
        { cpus: 1, memBytes: GiB },
        { ...clash.row, agent_id: rec.agentId },
      ),
    ).rejects.toThrow();
    expect(await spawnRow(rec.agentId)).toBeUndefined();
    expect(await reservationRow(rec.agentId)).toBeUndefined();
    expect(await tokenRows(rec.agentId)).toHaveLength(0);
  });

  it('leaves no token when the spawn record cannot be stored', async () => {
    const rec = spawn();
    await store.spawns.insertSpawn(rec, { cpus: 1, memBytes: GiB });
    // The same agent id again: its spawn row clashes, so its token is not stored either.
    const minted = newToken({ agentId: rec.agentId, labels: [], kind: 'ephemeral', now: T0 });
    await expect(
      store.spawns.insertSpawnAndToken(rec, { cpus: 1, memBytes: GiB }, minted.row),
    ).rejects.toThrow();
    expect(await store.tokens.check(minted.token, T0)).toMatchObject({ ok: false });
  });
});

describe('SpawnsRepo.deleteAgent', () => {
  it('removes the spawn record, the reservation and the job correlation of one agent only', async () => {
    const gone = spawn();
    const kept = spawn();
    await store.spawns.insertSpawn(gone, { cpus: 1, memBytes: GiB });
    await store.spawns.insertSpawn(kept, { cpus: 2, memBytes: GiB });
    await store.spawns.correlate(gone.agentId, 'r1', gone.boundJobId!, T0);
    await store.spawns.correlate(kept.agentId, 'r1', kept.boundJobId!, T0);

    await store.spawns.deleteAgent(gone.agentId);
    expect(await spawnRow(gone.agentId)).toBeUndefined();
    expect(await reservationRow(gone.agentId)).toBeUndefined();
    const correlations = await store.db.selectFrom('scaler_agent_jobs').select('agent_id').execute();
    expect(correlations.map((c) => c.agent_id)).not.toContain(gone.agentId);
    expect(correlations.map((c) => c.agent_id)).toContain(kept.agentId);
    expect(await spawnRow(kept.agentId)).toBeDefined();
    expect(await reservationRow(kept.agentId)).toBeDefined();
  });

  it('is harmless for an unknown agent and when repeated', async () => {
    const rec = spawn();
    await store.spawns.insertSpawn(rec, { cpus: 1, memBytes: 0 });
    await store.spawns.deleteAgent(uid('ghost'));
    await store.spawns.deleteAgent(rec.agentId);
    await store.spawns.deleteAgent(rec.agentId);
    expect(await spawnRow(rec.agentId)).toBeUndefined();
  });
});

describe('SpawnsRepo listings and updates', () => {
  it('lists only the spawns and reservations of the given owner', async () => {
    const owner = uid('inst');
    const mine = [spawn({ ownerInstanceId: owner }), spawn({ ownerInstanceId: owner })];
    const theirs = spawn({ ownerInstanceId: uid('inst') });
    for (const r of [...mine, theirs]) await store.spawns.insertSpawn(r, { cpus: 0.5, memBytes: 0 });

    const owned = await store.spawns.listOwned(owner);
    expect(owned.map((r) => r.agent_id).sort()).toEqual(mine.map((r) => r.agentId).sort());
    expect(owned.every((r) => r.owner_instance_id === owner)).toBe(true);
    const reservations = await store.spawns.listReservations(owner);
    expect(reservations.map((r) => r.agent_id).sort()).toEqual(mine.map((r) => r.agentId).sort());
    expect(await store.spawns.listOwned(uid('nobody'))).toEqual([]);
  });

  it('records the backend handle and the registration time', async () => {
    const rec = spawn();
    await store.spawns.insertSpawn(rec, { cpus: 1, memBytes: 0 });
    await store.spawns.setBackendRef(rec.agentId, 'pgid:4242');
    await store.spawns.markRegistered(rec.agentId, new Date(T0.getTime() + 5000));
    const row = (await spawnRow(rec.agentId))!;
    expect(row.backend_ref).toBe('pgid:4242');
    expect(row.registered_at?.getTime()).toBe(T0.getTime() + 5000);
  });

  it('keeps one correlation per agent, the latest', async () => {
    const rec = spawn();
    await store.spawns.insertSpawn(rec, { cpus: 1, memBytes: 0 });
    await store.spawns.correlate(rec.agentId, 'r1', 'j-first', T0);
    await store.spawns.correlate(rec.agentId, 'r2', 'j-second', T0);
    const rows = await store.db
      .selectFrom('scaler_agent_jobs')
      .selectAll()
      .where('agent_id', '=', rec.agentId)
      .execute();
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ run_id: 'r2', job_id: 'j-second' });
  });
});
