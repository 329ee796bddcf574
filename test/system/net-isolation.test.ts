/**
 * NftAgentIsolation against the kernel: real nft, in namespaces this file builds (a host with the
 * agents' bridge, an RFC1918 host, a public-ish host, three agents). Runs in the generic system tier.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IsolationError, type AgentRuleRequest } from '../../src/net/isolation.js';
import { NftAgentIsolation } from '../../src/net/nft-isolation.js';
import { probeNft } from '../../src/net/nft-preflight.js';
import { createNftRunner } from '../../src/net/nft-runner.js';
import { buildLab, canConnect, type Lab } from '../helpers/netns-lab.js';

const ORCH = 18080;
const OTHER = 18081;
const prefix = `h2ni${randomBytes(3).toString('hex')}`;
let lab: Lab;
let iso: NftAgentIsolation;
let a0: string, a1: string, a2: string;

function req(ns: string, policy?: AgentRuleRequest['policy']): AgentRuleRequest {
  return {
    agentId: `scaler-container-${ns}`,
    scalerName: 'netiso',
    ip: lab.agentIp.get(ns)!,
    orchestrator: { address: '172.30.0.1', port: ORCH },
    hostAccess: [],
    policy,
  };
}

async function eventuallyConnects(ns: string, host: string, port: number): Promise<void> {
  for (let i = 0; i < 40; i++) if (await canConnect(ns, host, port)) return;
  throw new Error(`${ns} never reached ${host}:${port}`);
}

beforeAll(async () => {
  lab = await buildLab(prefix, 3, [ORCH, OTHER]);
  [a0, a1, a2] = lab.agents as [string, string, string];
  iso = new NftAgentIsolation({ runner: createNftRunner({ netns: lab.host }), table: `${prefix}_t` });
  // Before any rule: every target answers, so a later "blocked" means the firewall blocked it.
  for (const [h, p] of [
    ['172.30.0.1', ORCH],
    ['172.30.0.1', OTHER],
    ['10.77.0.2', ORCH],
    ['198.51.100.2', ORCH],
  ] as const)
    await eventuallyConnects(a0, h, p);
});

afterAll(async () => {
  await lab?.destroy();
});

describe('nftables agent isolation (real nft, test-made namespaces)', () => {
  it('an agent reaches the orchestrator port on the gateway and public hosts, not RFC1918 hosts or other host ports', async () => {
    await iso.apply(req(a0));
    expect(await canConnect(a0, '172.30.0.1', ORCH)).toBe(true);
    expect(await canConnect(a0, '198.51.100.2', ORCH)).toBe(true);
    expect(await canConnect(a0, '10.77.0.2', ORCH)).toBe(false);
    // Other ports on the host's own addresses (its RFC1918 one included): the input hook drops them.
    expect(await canConnect(a0, '10.77.0.1', OTHER)).toBe(false);
    expect(await canConnect(a0, '172.30.0.1', OTHER)).toBe(false);
    // The default host set admits the orchestrator's port on any host address.
    expect(await canConnect(a0, '10.77.0.1', ORCH)).toBe(true);
    // An address of the agents' subnet without rules of its own reaches nothing, the orchestrator
    // included: the table refuses it until its rules are in force.
    expect(await canConnect(a2, '10.77.0.2', ORCH)).toBe(false);
    expect(await canConnect(a2, '198.51.100.2', ORCH)).toBe(false);
    expect(await canConnect(a2, '172.30.0.1', ORCH)).toBe(false);
  });

  it('denyAll admits only the allowlist (and the orchestrator); the other agent keeps its own rules', async () => {
    await iso.apply(req(a1, { denyAll: true, allowlist: ['10.77.0.2/32'] }));
    expect(await canConnect(a1, '10.77.0.2', ORCH)).toBe(true);
    expect(await canConnect(a1, '198.51.100.2', ORCH)).toBe(false);
    expect(await canConnect(a1, '172.30.0.1', ORCH)).toBe(true);
    expect(await canConnect(a0, '10.77.0.2', ORCH)).toBe(false);
    expect(await canConnect(a0, '198.51.100.2', ORCH)).toBe(true);
  });

  it('re-applying for a recycled address replaces the old rules instead of adding to them', async () => {
    await iso.apply(req(a0, { denyAll: true }));
    expect(await canConnect(a0, '198.51.100.2', ORCH)).toBe(false);
    await iso.apply(req(a0, { denyAll: false, allowlist: ['10.77.0.0/24'] }));
    expect(await canConnect(a0, '198.51.100.2', ORCH)).toBe(true);
    expect(await canConnect(a0, '10.77.0.2', ORCH)).toBe(true);
    await iso.apply(req(a0));
    expect(await canConnect(a0, '10.77.0.2', ORCH)).toBe(false);
  });

  it('remove leaves no chain or map element for the address and is idempotent; the other address is kept', async () => {
    const ip0 = lab.agentIp.get(a0)!;
    const ip1 = lab.agentIp.get(a1)!;
    expect(await iso.listRuled()).toEqual([ip0, ip1]);
    await iso.remove(ip0);
    await iso.remove(ip0);
    expect(await iso.listRuled()).toEqual([ip1]);
    const text = JSON.stringify(
      await createNftRunner({ netns: lab.host }).list(['table', 'inet', iso.spec.table]),
    );
    expect(text).not.toContain(ip0);
    expect(text).not.toContain(ip0.replaceAll('.', '_'));
    // Its rules gone, the address is refused again (not let through), and the other keeps its own.
    expect(await canConnect(a0, '198.51.100.2', ORCH)).toBe(false);
    expect(await canConnect(a0, '172.30.0.1', ORCH)).toBe(false);
    expect(await canConnect(a1, '198.51.100.2', ORCH)).toBe(false);
    expect(await canConnect(a1, '172.30.0.1', ORCH)).toBe(true);
  });

  it('reapStale removes rule sets nothing live holds, inside the agent subnet only', async () => {
    const ip1 = lab.agentIp.get(a1)!;
    await iso.apply({ ...req(a2), ip: '172.30.9.9' });
    await iso.apply({ ...req(a2), ip: '10.200.0.7' });
    expect(await iso.reapStale(new Set([ip1]))).toBe(1);
    expect(await iso.listRuled()).toEqual(['10.200.0.7', ip1]);
    expect(await canConnect(a1, '198.51.100.2', ORCH)).toBe(false);
  });

  it('a guard check that listed a damaged table before dropTable does not put the table back after it', async () => {
    // The real runner, with the check's listing held at a gate after nft answered: the check has
    // seen the damage, and dropTable runs before it can restore anything.
    const real = createNftRunner({ netns: lab.host });
    let release = () => {};
    let armed = false;
    const gate = new Promise<void>((r) => (release = r));
    let listed = () => {};
    const seen = new Promise<void>((r) => (listed = r));
    const runner = {
      run: (c: Parameters<typeof real.run>[0]) => real.run(c),
      list: async (args: string[]) => {
        // The answer, or nft's refusal (a missing table), is held alike.
        const out = await real.list(args).then(
          (objects) => ({ objects }),
          (err: unknown) => ({ err }),
        );
        if (armed && args[0] === 'table') {
          armed = false;
          listed();
          await gate;
        }
        if ('err' in out) throw out.err;
        return out.objects;
      },
    };
    const own = new NftAgentIsolation({ runner, table: `${prefix}_g`, guardIntervalMs: 0 });
    await own.apply(req(a2));
    await real.run([{ delete: { table: { family: 'inet', name: own.spec.table } } }]);
    armed = true;
    const check = own.checkRuleset();
    await seen;
    const dropped = own.dropTable();
    release();
    await Promise.all([check, dropped]);
    expect(JSON.stringify(await real.list(['tables']))).not.toContain(own.spec.table);
  });

  it('rebuilds its table when someone deleted it, and dropTable leaves nothing behind', async () => {
    const runner = createNftRunner({ netns: lab.host });
    await runner.run([{ delete: { table: { family: 'inet', name: iso.spec.table } } }]);
    expect(await iso.listRuled()).toEqual([]);
    await iso.apply(req(a2));
    expect(await canConnect(a2, '10.77.0.2', ORCH)).toBe(false);
    await iso.dropTable();
    const tables = JSON.stringify(await runner.list(['tables']));
    expect(tables).not.toContain(iso.spec.table);
    expect(await canConnect(a2, '10.77.0.2', ORCH)).toBe(true);
  });

  it('a batch too large for the command line goes through a temp file, atomically', async () => {
    const runner = createNftRunner({ netns: lab.host });
    const t = { family: 'inet', table: `${prefix}_big` };
    const chains = Array.from({ length: 1500 }, (_, i) => ({ add: { chain: { ...t, name: `c${i}` } } }));
    expect(JSON.stringify(chains).length).toBeGreaterThan(64 * 1024);
    await runner.run([{ add: { table: { family: 'inet', name: t.table } } }, ...chains]);
    const listed = await runner.list(['table', 'inet', t.table]);
    expect(listed.filter((o) => o.chain).length).toBe(1500);
    // One bad command fails the whole batch: nothing of it is applied.
    const bad = [
      ...chains.map((c) => ({ add: { chain: { ...c.add.chain, name: `${c.add.chain.name}x` } } })),
      { delete: { chain: { ...t, name: 'nope' } } },
    ];
    await expect(runner.run(bad)).rejects.toThrow(/exited with 1/);
    expect((await runner.list(['table', 'inet', t.table])).filter((o) => o.chain).length).toBe(1500);
    await runner.run([{ delete: { table: { family: 'inet', name: t.table } } }]);
  });

  it('a missing nft binary fails the probe with the remedy', async () => {
    const err = await probeNft(createNftRunner({ command: `/nonexistent/${prefix}/nft` }), 'netiso').catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(IsolationError);
    expect((err as IsolationError).message).toMatch(/scaler "netiso".*nft.*networkIsolation: false/s);
    await expect(probeNft(createNftRunner({ netns: lab.host }), 'netiso')).resolves.toBeUndefined();
  });
});
