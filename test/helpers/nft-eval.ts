/**
 * A small interpreter for the subset of nft JSON our rule builder emits, so unit and property tests
 * can ask "what happens to this packet" instead of comparing rule text. It throws on any expression
 * it does not know, so a new kind of rule cannot silently evaluate as "no match".
 */
import type { NftCommand } from '../../src/net/nft-runner.js';

export interface Packet {
  /** Only the base chains look at it (the verdict map and the subnet refusal). */
  saddr?: string;
  daddr: string;
  proto: 'tcp' | 'udp' | 'icmp';
  dport?: number;
}

type Verdict = 'accept' | 'drop' | 'reject' | 'fallthrough';

const num = (a: string) => a.split('.').reduce((acc, p) => acc * 256 + Number(p), 0);

export function inCidr(ip: string, cidr: string): boolean {
  const [net, len] = cidr.split('/');
  const bits = len === undefined ? 32 : Number(len);
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  return (num(ip) & mask) >>> 0 === (num(net!) & mask) >>> 0;
}

function addrMatches(ip: string, right: unknown): boolean {
  if (typeof right === 'string') return inCidr(ip, right);
  const r = right as { prefix?: { addr: string; len: number }; set?: unknown[] };
  if (r.prefix) return inCidr(ip, `${r.prefix.addr}/${r.prefix.len}`);
  if (r.set) return r.set.some((x) => addrMatches(ip, x));
  throw new Error(`unknown address value ${JSON.stringify(right)}`);
}

function matches(p: Packet, m: { op: string; left: Record<string, unknown>; right: unknown }): boolean {
  const left = m.left as { payload?: { protocol: string; field: string }; meta?: { key: string } };
  if (m.op !== '==') throw new Error(`unknown op ${m.op}`);
  if (left.payload?.protocol === 'ip' && left.payload.field === 'daddr') return addrMatches(p.daddr, m.right);
  if (left.payload?.protocol === 'ip' && left.payload.field === 'saddr') {
    if (p.saddr === undefined) throw new Error('a base-chain rule needs the packet source address');
    return addrMatches(p.saddr, m.right);
  }
  if (left.meta?.key === 'l4proto')
    return typeof m.right === 'string'
      ? m.right === p.proto
      : (m.right as { set: string[] }).set.includes(p.proto);
  if (left.payload?.field === 'dport') {
    if (left.payload.protocol !== 'th' && left.payload.protocol !== p.proto) return false;
    return p.proto !== 'icmp' && p.dport === m.right;
  }
  throw new Error(`unknown match ${JSON.stringify(m)}`);
}

/** The rules of `chain` in order, as added by `commands` (after the last flush of that chain). */
export function chainRules(commands: NftCommand[], chain: string): unknown[][] {
  let rules: unknown[][] = [];
  for (const c of commands) {
    const flush = (c.flush as { chain?: { name: string } } | undefined)?.chain;
    if (flush?.name === chain) rules = [];
    const rule = (c.add as { rule?: { chain: string; expr: unknown[] } } | undefined)?.rule;
    if (rule?.chain === chain) rules.push(rule.expr);
  }
  return rules;
}

/** First rule whose every match holds decides; a chain with no deciding rule falls through (policy accept). */
export function evaluate(rules: unknown[][], p: Packet): Verdict {
  for (const expr of rules) {
    let ok = true;
    for (const e of expr as Record<string, unknown>[]) {
      if ('match' in e) {
        if (!matches(p, e.match as never)) {
          ok = false;
          break;
        }
      } else if ('accept' in e) return 'accept';
      else if ('drop' in e) return 'drop';
      else if ('reject' in e) return 'reject';
      else throw new Error(`unknown statement ${JSON.stringify(e)}`);
    }
    if (!ok) continue;
  }
  return 'fallthrough';
}

/** Every object name (chains, map element keys) a batch touches, for "one address only" checks. */
export function touchedNames(commands: NftCommand[]): { chains: string[]; elements: string[] } {
  const chains = new Set<string>();
  const elements = new Set<string>();
  for (const c of commands) {
    for (const body of Object.values(c) as Record<string, Record<string, unknown>>[]) {
      if (body.chain) chains.add(body.chain.name as string);
      if (body.rule) chains.add(body.rule.chain as string);
      if (body.element) {
        for (const e of body.element.elem as unknown[]) {
          const key = Array.isArray(e) ? (e[0] as string) : (e as string);
          elements.add(key);
          if (Array.isArray(e)) chains.add((e[1] as { jump: { target: string } }).jump.target);
        }
      }
    }
  }
  return { chains: [...chains], elements: [...elements] };
}

/**
 * A new packet (no conntrack state) through a base chain (`forward` or `input`): the reply rule does
 * not match it, the verdict map jumps to the source address's chain (if that address has one in
 * `commands`), and what that chain leaves undecided goes on to the base chain's later rules.
 */
export function evaluateBase(
  commands: NftCommand[],
  base: 'forward' | 'input',
  p: Packet & { saddr: string },
): Verdict {
  const elements = new Map<string, string>();
  for (const c of commands) {
    const added = (c.add as { element?: { name: string; elem: unknown[] } } | undefined)?.element;
    for (const e of added?.elem ?? [])
      if (Array.isArray(e))
        elements.set(`${added!.name}|${e[0] as string}`, (e[1] as { jump: { target: string } }).jump.target);
    const deleted = (c.delete as { element?: { name: string; elem: string[] } } | undefined)?.element;
    for (const key of deleted?.elem ?? []) elements.delete(`${deleted!.name}|${key}`);
  }
  for (const expr of chainRules(commands, base)) {
    const first = expr[0] as Record<string, unknown>;
    if ('match' in first && JSON.stringify(first).includes('"ct"')) continue; // replies only
    if ('vmap' in first) {
      const map = (first.vmap as { data: string }).data.slice(1);
      const target = elements.get(`${map}|${p.saddr}`);
      if (target === undefined) continue;
      const v = evaluate(chainRules(commands, target), p);
      if (v !== 'fallthrough') return v;
      continue;
    }
    const v = evaluate([expr], p);
    if (v !== 'fallthrough') return v;
  }
  return 'accept'; // the base chains' policy
}
