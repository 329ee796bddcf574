/**
 * Restart recovery: spawn rows and reservations are persisted; a new manager on the same store
 * and instance id re-adopts what its backends still hold, rebuilds cap usage from the rows,
 * reclaims what they do not, and tears down adopted agents that never reconnect.
 */
import { describe, expect, it } from 'vitest';
import { spawnToken } from '../../helpers/harness-agents.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
const MiB = 1024 * 1024;
const config = scalerConfig({
  version: 1,
  scalers: [
    bareMetal('alpha', [{ labels: ['linux'], resources: { requests: { cpus: 1.5, memory: '256m' } } }], {
      maxAgents: 3,
    }),
  ],
});

/** An orchestrator that spawned a bound agent (registered? no) and a warm one, then "crashed". */
async function before(): Promise<{
  h: ManagerHarness;
  bound: string;
  warm: string;
  jobId: string;
  tokens: Map<string, string>;
}> {
  const h = await hs.make({ instanceId: 'orch-1', config });
  const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
  const match = h.manager.routingTable()[0]!;
  const w = await h.manager.provision(match, h.manager.resourcesFor(match));
  if (w.action !== 'spawning') throw new Error(w.action);
  await h.settle();
  const b = h.backend('alpha');
  for (const id of b.pendingIds()) b.resolveSpawn(id);
  await h.settle();
  const bound = b.spawns.find((s) => s.boundJobId === ids[0])!.agentId;
  return {
    h,
    bound,
    warm: w.agentId,
    jobId: ids[0]!,
    tokens: new Map(b.spawns.map((s) => [s.agentId, spawnToken(s)])),
  };
}

describe('restart recovery', () => {
  it('persists spawn rows (with backend refs) and reservations', async () => {
    const { h, bound, warm } = await before();
    const rows = await h.spawnRows();
    expect(rows.map((r) => r.agent_id).sort()).toEqual([bound, warm].sort());
    for (const r of rows) expect(r.backend_ref).toBe(`rec:${r.agent_id}`);
    const res = await h.reservationRows();
    expect(res.map((r) => [r.agent_id, r.cpu_units, Number(r.mem_bytes)]).sort()).toEqual(
      [
        [bound, 1.5, 256 * MiB],
        [warm, 1.5, 256 * MiB],
      ].sort(),
    );
  });

  it('re-adopts agents whose compute survived, rebuilds cap usage, and accepts their registration', async () => {
    const { bound, warm, jobId, tokens } = await before();
    const h2 = await hs.make({
      instanceId: 'orch-1',
      config,
      dispatcher: false,
      configureBackend: (b) => {
        b.adoptResult = true;
      },
    });
    const counts = await h2.manager.recover(60_000);
    expect(counts).toEqual({ adopted: 2, reclaimed: 0, dropped: 0 });
    const b = h2.backend('alpha');
    expect(b.adopts.map((a) => [a.agentId, a.backendRef]).sort()).toEqual(
      [
        [bound, `rec:${bound}`],
        [warm, `rec:${warm}`],
      ].sort(),
    );
    expect(h2.manager.capBook().count('alpha')).toBe(2);
    expect(h2.manager.capBook().usage('alpha')).toEqual({ cpus: 3, memBytes: 512 * MiB });
    // Rebuilt usage caps like live usage: one more fits maxAgents 3, a fourth does not.
    expect(h2.manager.isProvisioning(jobId)).toBe(true);
    expect((await h2.manager.requestScale({ id: 'x1', runId: 'r', runsOn: ['linux'] })).action).toBe(
      'spawning',
    );
    expect((await h2.manager.requestScale({ id: 'x2', runId: 'r', runsOn: ['linux'] })).action).toBe(
      'at-capacity',
    );
    // The agents reconnect with the tokens they were started with.
    const r1 = await h2.registerAgent(bound, { token: tokens.get(bound)! });
    expect(r1).toMatchObject({ ok: true, result: { scalerName: 'alpha', boundJobId: jobId } });
    const r2 = await h2.registerAgent(warm, { token: tokens.get(warm)! });
    expect(r2).toMatchObject({ ok: true, result: { scalerName: 'alpha', boundJobId: undefined } });
    // Reconnected in time: the window passing does nothing to them.
    await h2.advance(60_000);
    expect(b.destroys).toEqual([]);
    expect(h2.manager.capBook().count('alpha')).toBe(3);
  });

  it('reclaims agents the backend cannot adopt: reapUnowned, rows deleted, nothing reserved', async () => {
    const { bound, warm, tokens } = await before();
    const h2 = await hs.make({
      instanceId: 'orch-1',
      config,
      dispatcher: false,
      configureBackend: (b) => {
        b.adoptResult = (id) => id === warm;
        b.reapResult = true;
      },
    });
    const counts = await h2.manager.recover(60_000);
    expect(counts).toEqual({ adopted: 1, reclaimed: 1, dropped: 0 });
    expect(h2.backend('alpha').reaps).toEqual([{ agentId: bound, backendRef: `rec:${bound}` }]);
    expect((await h2.spawnRows()).map((r) => r.agent_id)).toEqual([warm]);
    expect((await h2.reservationRows()).map((r) => r.agent_id)).toEqual([warm]);
    expect(h2.manager.capBook().count()).toBe(1);
    expect(h2.manager.entries().map((e) => e.agentId)).toEqual([warm]);
    // The reclaimed agent cannot register any more.
    expect(await h2.registerAgent(bound, { token: tokens.get(bound)! })).toMatchObject({ ok: false });
  });

  it('tears down recovered agents that do not reconnect within the window', async () => {
    const { bound, warm, tokens } = await before();
    const h2 = await hs.make({
      instanceId: 'orch-1',
      config,
      dispatcher: false,
      configureBackend: (b) => {
        b.adoptResult = true;
      },
    });
    await h2.manager.recover(60_000);
    expect((await h2.registerAgent(warm, { token: tokens.get(warm)! })).ok).toBe(true);
    await h2.advance(59_999);
    expect(h2.backend('alpha').destroys).toEqual([]);
    await h2.advance(1);
    expect(h2.backend('alpha').destroys.map((d) => d.agentId)).toEqual([bound]);
    expect(h2.manager.entries().map((e) => e.agentId)).toEqual([warm]);
    expect(h2.manager.capBook().count()).toBe(1);
    expect((await h2.spawnRows()).map((r) => r.agent_id)).toEqual([warm]);
    expect((await h2.reservationRows()).map((r) => r.agent_id)).toEqual([warm]);
  });

  it('rows of another instance are left alone', async () => {
    const { bound, warm } = await before();
    const other = await hs.make({
      instanceId: 'orch-2',
      config,
      dispatcher: false,
      configureBackend: (b) => {
        b.adoptResult = true;
      },
    });
    expect(await other.manager.recover(60_000)).toEqual({ adopted: 0, reclaimed: 0, dropped: 0 });
    expect((await other.spawnRows()).map((r) => r.agent_id).sort()).toEqual([bound, warm].sort());
    expect(other.manager.capBook().count()).toBe(0);
  });

  it('revokes, on recovery, scaler-agent tokens that no spawn record backs, and only those', async () => {
    const { h, bound, warm, tokens } = await before();
    // A teardown that deleted the record and died before the revocation (the old order).
    await h.store.spawns.deleteAgent(warm);
    const lookalike = await h.store.tokens.mint({
      agentId: 'scaler-an-operators-static',
      labels: ['linux'],
      kind: 'static',
      now: new Date(),
    });
    const h2 = await hs.make({ instanceId: 'orch-1', config, dispatcher: false, configureBackend: adoptAll });
    expect(await h2.manager.recover(60_000)).toEqual({
      adopted: 1,
      reclaimed: 0,
      dropped: 0,
      revokedTokens: 1,
    });
    expect(await liveTokenAgents(h2)).toEqual([bound, 'scaler-an-operators-static'].sort());
    expect(await h2.registerAgent(warm, { token: tokens.get(warm)! })).toMatchObject({ ok: false });
    expect((await h2.store.tokens.check(lookalike.token, new Date())).ok).toBe(true);
    // A second start finds nothing more to revoke.
    const h3 = await hs.make({ instanceId: 'orch-1', config, dispatcher: false, configureBackend: adoptAll });
    expect((await h3.manager.recover(60_000)).revokedTokens).toBeUndefined();
  });

  for (const crashAfter of [0, 1]) {
    it(`a teardown killed after ${crashAfter} of its two writes leaves no live token once restarted`, async () => {
      const { h, warm } = await before();
      // The process "dies" at the chosen write: that write and every later one never happen.
      let writes = 0;
      let died!: () => void;
      const dead = new Promise<void>((resolve) => (died = resolve));
      const dieAt =
        <A extends unknown[]>(f: (...a: A) => Promise<void>) =>
        (...a: A): Promise<void> => {
          if (writes++ < crashAfter) return f(...a);
          died();
          return new Promise<void>(() => undefined);
        };
      const { tokens, spawns } = h.store;
      const [revoke, remove] = [tokens.revokeForAgent, spawns.deleteAgent];
      tokens.revokeForAgent = dieAt(revoke.bind(tokens));
      spawns.deleteAgent = dieAt(remove.bind(spawns));
      void h.manager.teardown(
        h.manager.entries().find((e) => e.agentId === warm)!,
        'orphan',
      );
      await dead;
      expect(writes).toBe(crashAfter + 1);
      // The next process shares the store (the same objects here), not the dead one's fate.
      [tokens.revokeForAgent, spawns.deleteAgent] = [revoke, remove];
      const h2 = await hs.make({
        instanceId: 'orch-1',
        config,
        dispatcher: false,
        configureBackend: (b) => {
          b.adoptResult = (id) => id !== warm;
        },
      });
      await h2.manager.recover(60_000);
      const recorded = new Set((await h2.spawnRows()).map((r) => r.agent_id));
      expect(recorded.has(warm)).toBe(false);
      for (const id of await liveTokenAgents(h2)) expect(recorded.has(id), id).toBe(true);
    });
  }
});

function adoptAll(b: { adoptResult: boolean | ((id: string) => boolean) }): void {
  b.adoptResult = true;
}

/** Agents with a live ephemeral token, sorted. */
async function liveTokenAgents(h: ManagerHarness): Promise<string[]> {
  const rows = await h.store.db
    .selectFrom('agent_tokens')
    .select('agent_id')
    .where('revoked_at', 'is', null)
    .execute();
  return rows.map((r) => r.agent_id).sort();
}
