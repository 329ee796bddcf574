import { describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.js';

/**
 * Behaviour every storage engine must show; run against PGlite (unit tier) and PostgreSQL
 * (system tier) so the two cannot drift apart.
 */
export function describeStoreContract(
  engine: string,
  open: () => Promise<{ store: Store; close(): Promise<void> }>,
) {
  describe(`store contract on ${engine}`, () => {
    it('a queued job is claimed by exactly one of many concurrent agents', async () => {
      const { store, close } = await open();
      try {
        const now = new Date();
        await store.jobs.insertRun(
          { id: 'r-1', name: null },
          [{ id: 'j-1', name: 'a', runsOn: ['x'], spec: {} }],
          now,
        );
        const claims = await Promise.all(
          Array.from({ length: 12 }, (_, i) => store.jobs.claim('j-1', `agent-${i}`, now)),
        );
        expect(claims.filter(Boolean)).toHaveLength(1);
        const row = await store.jobs.get('j-1');
        expect(row!.state).toBe('dispatched');
        expect(row!.attempts).toBe(1);
        expect(await store.jobs.finish('j-1', 'succeeded', { exitCode: 0 }, now)).toBe(true);
        expect(await store.jobs.finish('j-1', 'failed', { exitCode: 1 }, now)).toBe(false);
      } finally {
        await close();
      }
    });

    it('keeps submission order, JSON columns and big integers intact', async () => {
      const { store, close } = await open();
      try {
        const jobs = Array.from({ length: 700 }, (_, i) => ({
          id: `j-${i}`,
          name: `n${i}`,
          runsOn: ['linux', `k${i}`],
          spec: { steps: [{ run: `echo ${i}` }] },
        }));
        await store.jobs.insertRun({ id: 'r-big', name: 'big' }, jobs, new Date());
        const open = await store.jobs.listOpen();
        expect(open.map((j) => j.id)).toEqual(jobs.map((j) => j.id));
        expect(open[5]!.runs_on).toEqual(['linux', 'k5']);
        expect(open[5]!.spec).toEqual({ steps: [{ run: 'echo 5' }] });
        await store.spawns.insertSpawn(
          {
            agentId: 'scaler-bare-metal-1',
            scalerName: 's',
            backendType: 'bare-metal',
            labelSet: ['a'],
            runId: null,
            boundJobId: null,
            ownerInstanceId: 'me',
            mandatoryLabels: [],
            spawnedAt: new Date(),
          },
          { cpus: 1.5, memBytes: 8 * 1024 ** 3 },
        );
        const [res] = await store.spawns.listReservations('me');
        expect(Number(res!.mem_bytes)).toBe(8 * 1024 ** 3);
        expect(res!.cpu_units).toBe(1.5);
      } finally {
        await close();
      }
    });

    it('stores only token hashes and refuses expired tokens', async () => {
      const { store, close } = await open();
      try {
        const now = new Date();
        const { token } = await store.tokens.mint({
          agentId: 'a',
          labels: ['x'],
          kind: 'static',
          ttlMs: 1000,
          now,
        });
        const rows = await store.db.selectFrom('agent_tokens').selectAll().execute();
        expect(JSON.stringify(rows)).not.toContain(token);
        expect((await store.tokens.check(token, now)).ok).toBe(true);
        expect(await store.tokens.check(token, new Date(now.getTime() + 2000))).toEqual({
          ok: false,
          reason: 'token expired',
        });
      } finally {
        await close();
      }
    });

    it('the queue re-read: ids of queued jobs in order, and whole rows only for the ids asked', async () => {
      const { store, close } = await open();
      try {
        const now = new Date();
        const jobs = Array.from({ length: 6 }, (_, i) => ({
          id: `q-${i}`,
          name: `n${i}`,
          runsOn: ['x'],
          spec: { steps: [{ run: `echo ${i}` }] },
          ...(i === 4 ? { claim: { agentId: 'a-4' } } : {}),
        }));
        const rows = await store.jobs.insertRun({ id: 'r-q', name: null }, jobs, now);
        expect(rows.map((r) => [r.id, r.state])).toEqual(
          jobs.map((j) => [j.id, j.claim ? 'dispatched' : 'queued']),
        );
        expect(await store.jobs.claim('q-1', 'a-1', now)).toBe(true);
        expect((await store.jobs.listQueuedIds()).map((r) => r.id)).toEqual(['q-0', 'q-2', 'q-3', 'q-5']);
        // Asked out of order, with a claimed and an unknown id among them.
        const among = await store.jobs.listQueuedByIds(['q-5', 'q-1', 'q-0', 'nope', 'q-4']);
        expect(among.map((r) => r.id)).toEqual(['q-0', 'q-5']);
        expect(among[1]!.spec).toEqual({ steps: [{ run: 'echo 5' }] });
        expect(await store.jobs.listQueuedByIds([])).toEqual([]);
      } finally {
        await close();
      }
    });
  });
}
