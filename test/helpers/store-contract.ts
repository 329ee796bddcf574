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
            peerAdoptable: false,
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

    it('a claim with alternates takes the first of its jobs still queued, and no job goes to two agents', async () => {
      const { store, close } = await open();
      try {
        const now = new Date();
        const ids = Array.from({ length: 8 }, (_, i) => `c-${i}`);
        await store.jobs.insertRun(
          { id: 'r-c', name: null },
          ids.map((id) => ({ id, name: id, runsOn: ['x'], spec: { n: id } })),
          now,
        );
        // A peer took c-0 and c-1: the agent gets c-2, its first alternate still queued.
        expect(await store.jobs.claim('c-0', 'peer', now)).toBe(true);
        expect(await store.jobs.claim('c-1', 'peer', now)).toBe(true);
        const won = await store.jobs.claimMany(
          [{ jobId: 'c-0', agentId: 'a-1', alts: ['c-1', 'c-2', 'c-3'] }],
          now,
        );
        expect([...won]).toEqual([['c-2', { n: 'c-2' }]]);
        // Two agents in one statement: one keeps its planned job, the other falls back to its own.
        const two = await store.jobs.claimMany(
          [
            { jobId: 'c-3', agentId: 'a-2', alts: ['c-4'] },
            { jobId: 'c-2', agentId: 'a-3', alts: ['c-5', 'c-6'] },
          ],
          now,
        );
        expect([...two.keys()].sort()).toEqual(['c-3', 'c-5']);
        // Nothing of its list still queued: nothing taken.
        expect(
          (await store.jobs.claimMany([{ jobId: 'c-0', agentId: 'a-4', alts: ['c-3'] }], now)).size,
        ).toBe(0);
        const rows = await Promise.all(ids.map((id) => store.jobs.get(id)));
        expect(rows.map((r) => [r!.id, r!.state, r!.agent_id, r!.attempts])).toEqual([
          ['c-0', 'dispatched', 'peer', 1],
          ['c-1', 'dispatched', 'peer', 1],
          ['c-2', 'dispatched', 'a-1', 1],
          ['c-3', 'dispatched', 'a-2', 1],
          ['c-4', 'queued', null, 0],
          ['c-5', 'dispatched', 'a-3', 1],
          ['c-6', 'queued', null, 0],
          ['c-7', 'queued', null, 0],
        ]);
        // Claimers racing over the same candidates: each job goes to at most one, as its row says.
        const left = ['c-4', 'c-6', 'c-7'];
        const raced = await Promise.all(
          Array.from({ length: 6 }, (_, i) =>
            store.jobs.claimMany([{ jobId: left[0]!, agentId: `r-${i}`, alts: left.slice(1) }], now),
          ),
        );
        const got = raced.flatMap((m, i) => [...m.keys()].map((id) => [id, `r-${i}`]));
        expect(got.length).toBeGreaterThanOrEqual(1);
        expect(new Set(got.map(([id]) => id)).size).toBe(got.length);
        for (const [id, agent] of got) expect((await store.jobs.get(id!))!.agent_id).toBe(agent);
      } finally {
        await close();
      }
    });
  });
}
