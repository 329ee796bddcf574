/**
 * The agent firewall guard: rules flushed outside the orchestrator (a whole `nft flush ruleset`, an
 * emptied table, one agent's map element deleted) are found by comparing the table's listing with
 * what was installed, and put back; rules removed on purpose stay removed. The runner here is a
 * small in-memory nftables holding tables, chains with their rules, and verdict maps, listed the way
 * `nft -j list table` prints them.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { AgentRuleRequest } from '../../../src/net/isolation.js';
import { rulesetDamage } from '../../../src/net/nft-damage.js';
import { NftAgentIsolation } from '../../../src/net/nft-isolation.js';
import { applyCommands, baseCommands } from '../../../src/net/nft-rules.js';
import type { NftCommand, NftObject, NftRunner } from '../../../src/net/nft-runner.js';
import { NftError } from '../../../src/net/nft-runner.js';

type Obj = { table: string; name: string; elem?: unknown[] };

/** Tables → chains (rule lists) and maps (address → verdict); enough of nft for our batches. */
class MemoryNft implements NftRunner {
  readonly tables = new Map<
    string,
    { chains: Map<string, unknown[]>; maps: Map<string, Map<string, unknown>> }
  >();
  lists = 0;

  private table(name: string) {
    const t = this.tables.get(name);
    if (!t) throw new NftError(`nft failed`, `Error: No such file or directory; table ${name}`);
    return t;
  }

  async run(commands: NftCommand[]): Promise<void> {
    this.runNow(commands);
  }

  runNow(commands: NftCommand[]): void {
    for (const c of commands) {
      const [verb, body] = Object.entries(c)[0]! as [string, Record<string, Obj & { chain?: string }>];
      const [kind, o] = Object.entries(body)[0]! as [string, Obj & { chain: string }];
      if (kind === 'table') {
        if (verb === 'add' && !this.tables.has(o.name))
          this.tables.set(o.name, { chains: new Map(), maps: new Map() });
        if (verb === 'delete') this.tables.delete(o.name);
        continue;
      }
      const t = this.table(o.table);
      if (kind === 'chain') {
        if (verb === 'add' && !t.chains.has(o.name)) t.chains.set(o.name, []);
        if (verb === 'flush') t.chains.set(o.name, []);
        if (verb === 'delete') t.chains.delete(o.name);
      } else if (kind === 'rule') t.chains.get(o.chain)!.push(o);
      else if (kind === 'map') {
        if (!t.maps.has(o.name)) t.maps.set(o.name, new Map());
      } else if (kind === 'element') {
        const m = t.maps.get(o.name)!;
        for (const e of o.elem ?? []) {
          const [key, val] = Array.isArray(e) ? (e as [string, unknown]) : [e as string, undefined];
          if (verb === 'add') m.set(key, val);
          else m.delete(key);
        }
      }
    }
  }

  async list(args: string[]): Promise<NftObject[]> {
    this.lists++;
    return this.listNow(args);
  }

  listNow(args: string[]): NftObject[] {
    const name = args[2]!;
    const t = this.table(name);
    const out: NftObject[] = [{ table: { family: 'inet', name } }];
    for (const [chain, rules] of t.chains) {
      out.push({ chain: { family: 'inet', table: name, name: chain } });
      for (const r of rules) out.push({ rule: { ...(r as object), table: name, chain } });
    }
    for (const [map, elems] of t.maps)
      out.push({ map: { family: 'inet', table: name, name: map, elem: [...elems].map(([k, v]) => [k, v]) } });
    return out;
  }
}

const spec = { table: 'kici_agents', gateway: '172.30.0.1', subnet: '172.30.0.0/16' };

function req(i: number): AgentRuleRequest {
  return {
    agentId: `scaler-container-${i}`,
    scalerName: 'ctr',
    ip: `172.30.0.${i + 2}`,
    orchestrator: { address: '172.30.0.1', port: 8080 },
    hostAccess: [],
    policy: undefined,
  };
}

function setup(n: number) {
  const nft = new MemoryNft();
  const warnings: object[] = [];
  const iso = new NftAgentIsolation({
    runner: nft,
    guardIntervalMs: 0,
    logger: { warn: (o) => warnings.push(o), error: () => undefined },
  });
  return { nft, iso, warnings, reqs: Array.from({ length: n }, (_, i) => req(i)) };
}

/** What the table holds, as comparable text: chains with rules, map elements. */
function snapshot(nft: MemoryNft): string {
  const t = nft.tables.get(spec.table);
  if (!t) return 'no table';
  const maps = [...t.maps].map(([m, e]) => [m, [...e.keys()].sort()]);
  return JSON.stringify({ chains: [...t.chains].sort(), maps: maps.sort() });
}

describe('the agent firewall guard', () => {
  it('finds nothing to do while the rules are as installed', async () => {
    const { nft, iso, reqs } = setup(3);
    for (const r of reqs) await iso.apply(r);
    const before = snapshot(nft);
    expect(await iso.checkRuleset()).toEqual({ base: false, agents: [], restored: false });
    expect(snapshot(nft)).toBe(before);
  });

  it('puts back the whole table after a `nft flush ruleset`, and says so', async () => {
    const { nft, iso, warnings, reqs } = setup(3);
    for (const r of reqs) await iso.apply(r);
    const before = snapshot(nft);
    nft.tables.clear();
    const r = await iso.checkRuleset();
    expect(r.base).toBe(true);
    expect(r.agents.sort()).toEqual(reqs.map((q) => q.ip).sort());
    expect(r.restored).toBe(true);
    expect(snapshot(nft)).toBe(before);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ base: true, agents: reqs.map((q) => q.agentId) });
  });

  it('refills chains emptied by a `flush table`', async () => {
    const { nft, iso, reqs } = setup(2);
    for (const r of reqs) await iso.apply(r);
    const before = snapshot(nft);
    const rulesBefore = [...nft.tables.get(spec.table)!.chains.values()].map((c) => c.length);
    for (const chain of nft.tables.get(spec.table)!.chains.values()) chain.length = 0;
    expect((await iso.checkRuleset()).restored).toBe(true);
    expect(snapshot(nft)).toBe(before);
    expect([...nft.tables.get(spec.table)!.chains.values()].map((c) => c.length)).toEqual(rulesBefore);
  });

  it('installs a new agent only with the base whole again (a `flush table` before it)', async () => {
    const { nft, iso, reqs } = setup(2);
    await iso.apply(reqs[0]!);
    const base = () =>
      JSON.stringify(
        [...nft.tables.get(spec.table)!.chains].filter(([c]) => c === 'forward' || c === 'input'),
      );
    const before = base();
    for (const chain of nft.tables.get(spec.table)!.chains.values()) chain.length = 0;
    await iso.apply(reqs[1]!);
    expect(base()).toBe(before);
  });

  it('does not put back the rules of an agent removed on purpose', async () => {
    const { nft, iso, reqs } = setup(2);
    for (const r of reqs) await iso.apply(r);
    await iso.remove(reqs[0]!.ip);
    nft.tables.clear();
    const r = await iso.checkRuleset();
    expect(r.agents).toEqual([reqs[1]!.ip]);
    expect(await iso.listRuled()).toEqual([reqs[1]!.ip]);
  });

  it('finds exactly the agents whose rules were damaged (property)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 6 }),
        fc.array(fc.tuple(fc.nat(5), fc.constantFrom('element', 'chain', 'rule')), { maxLength: 6 }),
        (n, cuts) => {
          const nft = new MemoryNft();
          const reqs = Array.from({ length: n }, (_, i) => req(i));
          nft.runNow([...baseCommands(spec), ...reqs.flatMap((r) => applyCommands(r, spec))]);
          const t = nft.tables.get(spec.table)!;
          const damaged = new Set<string>();
          for (const [i, what] of cuts) {
            const r = reqs[i % n]!;
            const id = r.ip.replaceAll('.', '_');
            if (what === 'element') t.maps.get('agent_in')!.delete(r.ip);
            else if (what === 'chain') t.chains.delete(`kf_${id}`);
            else t.chains.get(`ki_${id}`)?.pop();
            damaged.add(r.ip);
          }
          const d = rulesetDamage(nft.listNow(['table', 'inet', spec.table]), spec, reqs);
          expect(d.base).toBe(false);
          expect(new Set(d.agents)).toEqual(damaged);
        },
      ),
    );
  });

  it('checks on its own while agents have rules, and stops when the last is removed', async () => {
    const nft = new MemoryNft();
    let restored!: () => void;
    const warned = new Promise<void>((res) => (restored = res));
    const iso = new NftAgentIsolation({
      runner: nft,
      guardIntervalMs: 10,
      logger: { warn: () => restored(), error: () => undefined },
    });
    await iso.apply(req(0));
    nft.tables.clear();
    await warned;
    expect(await iso.listRuled()).toEqual([req(0).ip]);
    await iso.remove(req(0).ip);
    // Disarmed: a flush now is not the guard's business (no agent of ours to confine).
    const lists = nft.lists;
    nft.tables.clear();
    await iso.checkRuleset();
    expect(nft.lists).toBe(lists);
    iso.close();
  });
});
