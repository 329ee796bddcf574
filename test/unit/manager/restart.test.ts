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
});
