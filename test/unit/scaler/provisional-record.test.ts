/**
 * A provisional launch's spawn record (src/scaler/provisional-record.ts): written when the backend
 * asks for it (SpawnContext.record) or when the agent registers first, once; a write that fails
 * tears the spawn down; a spawn withdrawn before the ask gets no record. The manager on recording
 * backends that claim the capability, over an embedded store (where the token is kept in memory).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createStore, type Store } from '../../../src/store/index.js';
import type { OpenedDatabase } from '../../../src/store/open.js';
import type { SpawnRequest } from '../../../src/scaler/types.js';
import { memoryDatabase } from '../../helpers/data-dir.js';
import { ManagerHarness } from '../../helpers/manager-harness.js';
import { eventually } from '../../helpers/orchestrator.js';
import { bareMetal } from '../../helpers/scaler-config.js';

let h: ManagerHarness | undefined;
let db: OpenedDatabase | undefined;
afterEach(async () => {
  await h?.close();
  await db?.close();
  h = db = undefined;
});

/** A harness whose backend may launch before the record; `writes` counts the record's writes. */
async function harness(failWrite = false) {
  db = await memoryDatabase();
  const store: Store = createStore(db.db, 'pglite');
  const writes: string[] = [];
  const insert = store.spawns.insertSpawnAndToken.bind(store.spawns);
  store.spawns.insertSpawnAndToken = (record, ...rest) => {
    writes.push(record.agentId);
    if (failWrite) return Promise.reject(new Error('the disk refused the write'));
    return insert(record, ...rest);
  };
  h = await ManagerHarness.create({
    config: { version: 1, scalers: [bareMetal('local', [['linux']])] },
    store,
    configureBackend: (b) => {
      // Compute on this host that its backend finds again, and whose launcher undoes a start.
      Object.assign(b.capabilities, { localCompute: true, cleansOrphans: true, provisionalLaunch: true });
    },
  });
  return { h, writes };
}

async function firstSpawn(h: ManagerHarness): Promise<SpawnRequest & { record: () => Promise<void> }> {
  await eventually(() => h.allSpawns().length >= 1, 10_000, 'a spawn');
  const req = h.allSpawns()[0]!;
  expect(req.record).toBeTypeOf('function');
  return req as SpawnRequest & { record: () => Promise<void> };
}

const rowFor = async (h: ManagerHarness, agentId: string) =>
  (await h.spawnRows()).some((r) => r.agent_id === agentId);

describe("a provisional launch's spawn record", () => {
  it('is written when the backend asks for it, once however often it asks', async () => {
    const { h, writes } = await harness();
    await h.submit({ a: { runsOn: ['linux'] } });
    const req = await firstSpawn(h);
    expect(await rowFor(h, req.agentId)).toBe(false);
    await Promise.all([req.record(), req.record()]);
    await req.record();
    expect(writes).toEqual([req.agentId]);
    expect(await rowFor(h, req.agentId)).toBe(true);
  });

  it('is written before an agent that registers first is taken in, and the agent gets its job', async () => {
    const { h, writes } = await harness();
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    const req = await firstSpawn(h);
    // Its spawn has not returned, so nothing but the registration writes the record.
    const reg = await h.registerAgent(req.agentId);
    expect(reg.ok).toBe(true);
    expect(writes).toEqual([req.agentId]);
    expect(await rowFor(h, req.agentId)).toBe(true);
    h.backend('local').resolveSpawn(req.agentId);
    await h.settle();
    expect(h.assigned(req.agentId)).toEqual(ids);
  });

  it('that cannot be written tears the spawn down; the job waits for the next spawn', async () => {
    const { h } = await harness(true);
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    const req = await firstSpawn(h);
    await expect(req.record()).rejects.toThrow('the disk refused the write');
    await h.settle();
    expect(h.manager.entries().some((e) => e.agentId === req.agentId)).toBe(false);
    expect(h.backend('local').destroyedIds()).toContain(req.agentId);
    expect(await rowFor(h, req.agentId)).toBe(false);
    expect(await h.jobState(ids[0]!)).toBe('queued');
  });

  it('is never written for a spawn withdrawn before the backend asked', async () => {
    const { h, writes } = await harness();
    await h.submit({ a: { runsOn: ['linux'] } });
    const req = await firstSpawn(h);
    const m = h.manager.entries().find((e) => e.agentId === req.agentId)!;
    await h.manager.teardown(m, 'spawn-timeout');
    await expect(req.record()).rejects.toThrow('withdrawn before its record was written');
    expect(writes).toEqual([]);
    expect(await rowFor(h, req.agentId)).toBe(false);
  });
});
