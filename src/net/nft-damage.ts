/**
 * Is the agent firewall still what we installed? A pure comparison of `nft -j list table` output
 * with the batches that built it: someone's `nft flush ruleset` (or a firewall manager reloading
 * its own rules) removes our table, a `flush table` empties its chains, a hand-deleted map element
 * sends an agent's packets to the refusal. Each leaves agents either unconfined or cut off, so the
 * guard in nft-isolation.ts puts back whatever this says is damaged.
 */
import { AGENT_MAPS as MAPS, applyCommands, baseCommands, type NftTableSpec } from './nft-rules.js';
import type { NftCommand, NftObject } from './nft-runner.js';
import type { AgentRuleRequest } from './isolation.js';

export interface RulesetDamage {
  /** The table, its maps or its base chains are gone or hold fewer rules than we put there. */
  base: boolean;
  /** Addresses whose chains or map elements are gone or incomplete. */
  agents: string[];
}

/** How many rules each chain gets from these batches (the chains are flushed first, so exact). */
function expectedRules(commands: NftCommand[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const c of commands) {
    const rule = (c.add as { rule?: { chain: string } } | undefined)?.rule;
    if (rule) counts.set(rule.chain, (counts.get(rule.chain) ?? 0) + 1);
  }
  return counts;
}

/** The key of one map element as nft's JSON lists it: a bare address, or wrapped in `elem.val`. */
function elementKey(e: unknown): string | undefined {
  const first: unknown = Array.isArray(e) ? e[0] : e;
  if (typeof first === 'string') return first;
  const val = (first as { elem?: { val?: unknown } } | null)?.elem?.val;
  return typeof val === 'string' ? val : undefined;
}

function listed(objects: NftObject[], table: string) {
  const rules = new Map<string, number>();
  const maps = new Map<string, Set<string>>();
  let tablePresent = false;
  for (const o of objects) {
    if (o.table?.name === table) tablePresent = true;
    const rule = o.rule as { table?: string; chain?: string } | undefined;
    if (rule?.table === table && rule.chain) rules.set(rule.chain, (rules.get(rule.chain) ?? 0) + 1);
    const map = o.map as { table?: string; name?: string; elem?: unknown[] } | undefined;
    if (map?.table === table && map.name) {
      const keys = new Set<string>();
      for (const e of map.elem ?? []) {
        const k = elementKey(e);
        if (k) keys.add(k);
      }
      maps.set(map.name, keys);
    }
  }
  return { tablePresent, rules, maps };
}

/** What of the base and of these agents' rule sets is missing from `objects` (the table's listing). */
export function rulesetDamage(
  objects: NftObject[],
  spec: NftTableSpec,
  agents: readonly AgentRuleRequest[],
): RulesetDamage {
  const now = listed(objects, spec.table);
  const short = (want: Map<string, number>) =>
    [...want].some(([chain, n]) => (now.rules.get(chain) ?? 0) < n);
  const base = !now.tablePresent || short(expectedRules(baseCommands(spec)));
  const damaged = agents.filter((req) => {
    if (base) return true;
    const inMaps = MAPS.every((map) => now.maps.get(map)?.has(req.ip));
    return !inMaps || short(expectedRules(applyCommands(req, spec)));
  });
  return { base, agents: damaged.map((r) => r.ip) };
}
