import { afterEach, expect, it } from 'vitest';
import { bareMetal, ManagerHarness } from '../../helpers/manager-harness.js';

let h: ManagerHarness | undefined;
afterEach(async () => h?.close());

it('smoke', async () => {
  const t0 = Date.now();
  h = await ManagerHarness.create({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
  console.log('create', Date.now() - t0);
  const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
  const b = h.backend('alpha');
  expect(b.spawns).toHaveLength(1);
  const id = b.spawns[0]!.agentId;
  b.resolveSpawn(id);
  await h.settle();
  const r = await h.registerAgent(id);
  expect(r.ok).toBe(true);
  expect(h.assigned(id)).toEqual(ids);
  await h.finishJob(id, ids[0]!);
  await h.disconnect(id);
  expect(await h.jobState(ids[0]!)).toBe('succeeded');
  expect(h.manager.capBook().count()).toBe(0);
  expect(await h.spawnRows()).toEqual([]);
  console.log('total', Date.now() - t0);
});
