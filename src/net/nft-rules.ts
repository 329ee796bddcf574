/**
 * The agent firewall as nft JSON data: pure functions, so every rule can be checked without a kernel.
 *
 * Layout of the one `inet` table: two base chains (forward, input) that send an agent's packets,
 * by source address, through a verdict map to that address's own chains, which always end in a
 * verdict. Everything about one address therefore lives in two chains and two map elements, which
 * are replaced or deleted in a single atomic batch without touching any other address. After the
 * map, anything else from the agents' subnet is refused (a TCP reset, so a dial fails at once and the
 * agent retries), so an agent is confined from its first packet, before its own rules exist.
 */
import { isIP } from 'node:net';
import { parseHostAccessEntry, type HostAccessEntry } from '../config/addresses.js';
import type { AgentRuleRequest } from './isolation.js';
import type { NftCommand } from './nft-runner.js';

export interface NftTableSpec {
  /** The `inet` table's name (container default `kici_agents`; micro-VMs pass their own). */
  table: string;
  /** The agents' bridge gateway (the host's address on the bridge); DNS there is in the default host set. */
  gateway: string;
  /**
   * The agents' subnet. A packet from it with no address chain of its own is refused: an agent whose
   * rules are not in force yet (just started, or its rules failed or were reaped) reaches nothing.
   */
  subnet: string;
}

/** Destinations an agent never reaches unless allowed: RFC1918, CGNAT, link-local incl. cloud metadata. */
export const BLOCKED_RANGES = [
  '10.0.0.0/8',
  '172.16.0.0/12',
  '192.168.0.0/16',
  '100.64.0.0/10',
  '169.254.0.0/16',
];

const FWD_MAP = 'agent_fwd';
const IN_MAP = 'agent_in';
/** The verdict maps that send each agent address to its own chains. */
export const AGENT_MAPS = [FWD_MAP, IN_MAP] as const;
const FWD_PREFIX = 'kf_';
const IN_PREFIX = 'ki_';

/** `kf_172_30_0_2` for forwarded traffic, `ki_...` for traffic to the host itself. */
export function chainNames(ip: string): { fwd: string; input: string } {
  const id = ip.replaceAll('.', '_');
  return { fwd: FWD_PREFIX + id, input: IN_PREFIX + id };
}

/** The address an agent chain belongs to, or undefined for any other chain. */
export function ipOfChain(name: string): string | undefined {
  if (!name.startsWith(FWD_PREFIX) && !name.startsWith(IN_PREFIX)) return undefined;
  const ip = name.slice(FWD_PREFIX.length).replaceAll('_', '.');
  return isIP(ip) === 4 ? ip : undefined;
}

const ip4 = (field: 'saddr' | 'daddr') => ({ payload: { protocol: 'ip', field } });
const ACCEPT = { accept: null };
const DROP = { drop: null };
const REJECT_TCP = { reject: { type: 'tcp reset' } };
const REJECT = { reject: { type: 'icmpx', expr: 'admin-prohibited' } };

function addrValue(cidr: string): unknown {
  const [addr, len] = cidr.split('/');
  return len === undefined ? addr : { prefix: { addr, len: Number(len) } };
}

const daddrIs = (cidr: string) => ({ match: { op: '==', left: ip4('daddr'), right: addrValue(cidr) } });

/** `port` admits TCP and UDP (the config grammar's meaning); `*` matches any protocol and port. */
function portMatch(port: number | '*'): unknown[] {
  if (port === '*') return [];
  return [
    { match: { op: '==', left: { meta: { key: 'l4proto' } }, right: { set: ['tcp', 'udp'] } } },
    { match: { op: '==', left: { payload: { protocol: 'th', field: 'dport' } }, right: port } },
  ];
}

function accessRule(e: HostAccessEntry): unknown[] {
  return [...(e.address === '*' ? [] : [daddrIs(e.address)]), ...portMatch(e.port), ACCEPT];
}

/** The entries an agent may reach on the host: the policy's list, or the default set; always the orchestrator. */
export function resolveHostAccess(req: AgentRuleRequest, spec: NftTableSpec): HostAccessEntry[] {
  // Default set: DNS on the gateway, the orchestrator's port on any host address, host services.
  const declared = req.policy?.hostAccess ?? [
    `${spec.gateway}:53`,
    `*:${req.orchestrator.port}`,
    ...req.hostAccess,
  ];
  const parsed = declared
    .map(parseHostAccessEntry)
    .filter((e): e is HostAccessEntry => e !== undefined)
    // The chains only see IPv4 (they are reached by an IPv4 source address).
    .filter((e) => e.address === '*' || isIP(e.address.split('/')[0]!) === 4);
  const seen = new Set<string>();
  return parsed.filter((e) => {
    const key = `${e.address}|${e.port}`;
    return seen.has(key) ? false : (seen.add(key), true);
  });
}

/** The orchestrator, as the agent dials it: TCP to that address and port (WebSocket). */
function orchestratorRule(req: AgentRuleRequest): unknown[] {
  return [
    daddrIs(req.orchestrator.address),
    {
      match: {
        op: '==',
        left: { payload: { protocol: 'tcp', field: 'dport' } },
        right: req.orchestrator.port,
      },
    },
    ACCEPT,
  ];
}

/** Idempotent set-up of the table, maps and base chains; the base rules are replaced in the same batch. */
export function baseCommands(spec: NftTableSpec): NftCommand[] {
  const t = { family: 'inet', table: spec.table };
  const fromAgents = { match: { op: '==', left: ip4('saddr'), right: addrValue(spec.subnet) } };
  const isTcp = { match: { op: '==', left: { meta: { key: 'l4proto' } }, right: 'tcp' } };
  const base = (name: string, hook: string) => ({
    add: { chain: { ...t, name, type: 'filter', hook, prio: 0, policy: 'accept' } },
  });
  const rules = (chain: string, map: string): NftCommand[] => [
    { flush: { chain: { ...t, name: chain } } },
    {
      add: {
        rule: {
          ...t,
          chain,
          expr: [
            { match: { op: 'in', left: { ct: { key: 'state' } }, right: ['established', 'related'] } },
            ACCEPT,
          ],
        },
      },
    },
    { add: { rule: { ...t, chain, expr: [{ vmap: { key: ip4('saddr'), data: `@${map}` } }] } } },
    { add: { rule: { ...t, chain, expr: [fromAgents, isTcp, REJECT_TCP] } } },
    { add: { rule: { ...t, chain, expr: [fromAgents, REJECT] } } },
  ];
  return [
    { add: { table: { family: 'inet', name: spec.table } } },
    { add: { map: { ...t, name: FWD_MAP, type: 'ipv4_addr', map: 'verdict' } } },
    { add: { map: { ...t, name: IN_MAP, type: 'ipv4_addr', map: 'verdict' } } },
    base('forward', 'forward'),
    base('input', 'input'),
    ...rules('forward', FWD_MAP),
    ...rules('input', IN_MAP),
  ];
}

/**
 * Everything for one address, old rules replaced: the chains are created if missing and flushed,
 * so a recycled address never keeps a previous agent's accepts.
 */
export function applyCommands(req: AgentRuleRequest, spec: NftTableSpec): NftCommand[] {
  const t = { family: 'inet', table: spec.table };
  const { fwd, input } = chainNames(req.ip);
  const comment = `kici ${req.scalerName} ${req.agentId}`.slice(0, 120);
  const rule = (chain: string, expr: unknown[]): NftCommand => ({
    add: { rule: { ...t, chain, comment, expr } },
  });
  const forwardRules: unknown[][] = [
    orchestratorRule(req),
    ...(req.policy?.allowlist ?? [])
      .filter((c) => isIP(c.split('/')[0]!) === 4)
      .map((c) => [daddrIs(c), ACCEPT]),
    ...resolveHostAccess(req, spec)
      .filter((e) => e.address !== '*')
      .map(accessRule),
    [{ match: { op: '==', left: ip4('daddr'), right: { set: BLOCKED_RANGES.map(addrValue) } } }, DROP],
    // Every address chain ends in a verdict: falling back to the base chain would meet the refusal.
    [req.policy?.denyAll ? DROP : ACCEPT],
  ];
  const inputRules: unknown[][] = [
    orchestratorRule(req),
    ...resolveHostAccess(req, spec).map(accessRule),
    [DROP],
  ];
  const element = (map: string, chain: string): NftCommand => ({
    add: { element: { ...t, name: map, elem: [[req.ip, { jump: { target: chain } }]] } },
  });
  return [
    { add: { chain: { ...t, name: fwd } } },
    { flush: { chain: { ...t, name: fwd } } },
    { add: { chain: { ...t, name: input } } },
    { flush: { chain: { ...t, name: input } } },
    ...forwardRules.map((expr) => rule(fwd, expr)),
    ...inputRules.map((expr) => rule(input, expr)),
    element(FWD_MAP, fwd),
    element(IN_MAP, input),
  ];
}

/**
 * Remove one address's rules. nft refuses to delete what does not exist, so each object is added
 * first in the same batch: the batch then succeeds whether or not the rules were there, and a
 * concurrent remover cannot make it fail.
 */
export function removeCommands(ip: string, spec: NftTableSpec): NftCommand[] {
  const t = { family: 'inet', table: spec.table };
  const { fwd, input } = chainNames(ip);
  const pair = (map: string, chain: string): NftCommand[] => [
    { add: { chain: { ...t, name: chain } } },
    { add: { element: { ...t, name: map, elem: [[ip, { jump: { target: chain } }]] } } },
    { delete: { element: { ...t, name: map, elem: [ip] } } },
    { flush: { chain: { ...t, name: chain } } },
    { delete: { chain: { ...t, name: chain } } },
  ];
  return [...pair(FWD_MAP, fwd), ...pair(IN_MAP, input)];
}
