import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { AgentRuleRequest } from '../../../src/net/isolation.js';
import {
  BLOCKED_RANGES,
  applyCommands,
  baseCommands,
  chainNames,
  ipOfChain,
  removeCommands,
  resolveHostAccess,
} from '../../../src/net/nft-rules.js';
import {
  chainRules,
  evaluate,
  evaluateBase,
  inCidr,
  touchedNames,
  type Packet,
} from '../../helpers/nft-eval.js';

const spec = { table: 'kici_agents', gateway: '172.30.0.1', subnet: '172.30.0.0/16' };

function req(over: Partial<AgentRuleRequest> = {}): AgentRuleRequest {
  return {
    agentId: 'scaler-container-0a1b2c3d',
    scalerName: 'ctr',
    ip: '172.30.0.5',
    orchestrator: { address: '172.30.0.1', port: 8080 },
    hostAccess: [],
    policy: undefined,
    ...over,
  };
}

function verdicts(r: AgentRuleRequest, p: Packet) {
  const cmds = applyCommands(r, spec);
  const { fwd, input } = chainNames(r.ip);
  return { fwd: evaluate(chainRules(cmds, fwd), p), input: evaluate(chainRules(cmds, input), p) };
}

const octet = fc.integer({ min: 0, max: 255 });
const ipIn = (base: string) =>
  fc.tuple(octet, octet, octet, octet).map(([a, b, c, d]) => {
    const [net, len] = base.split('/');
    const n = net!.split('.').reduce((acc, p) => acc * 256 + Number(p), 0);
    const mask = (0xffffffff << (32 - Number(len))) >>> 0;
    const rnd = ((a << 24) | (b << 16) | (c << 8) | d) >>> 0;
    const v = ((n & mask) | (rnd & ~mask)) >>> 0;
    return [v >>> 24, (v >>> 16) & 255, (v >>> 8) & 255, v & 255].join('.');
  });
const anyIp = fc.tuple(octet, octet, octet, octet).map((o) => o.join('.'));
const privateIp = fc.constantFrom(...BLOCKED_RANGES).chain(ipIn);
const agentIp = ipIn('172.30.0.0/16');
const port = fc.integer({ min: 1, max: 65535 });
const cidr = fc.tuple(anyIp, fc.integer({ min: 8, max: 32 })).map(([a, l]) => `${a}/${l}`);
const hostAccessEntry = fc.oneof(
  port.map(String),
  fc.tuple(anyIp, port).map(([a, p]) => `${a}:${p}`),
  fc.tuple(cidr, fc.oneof(port.map(String), fc.constant('*'))).map(([c, p]) => `${c}:${p}`),
);
const policy = fc.option(
  fc.record({
    allowlist: fc.option(fc.array(cidr, { maxLength: 3 }), { nil: undefined }),
    denyAll: fc.boolean(),
    hostAccess: fc.option(fc.array(hostAccessEntry, { maxLength: 3 }), { nil: undefined }),
  }),
  { nil: undefined },
);
const request = fc
  .record({
    ip: agentIp,
    orchestrator: fc.record({ address: fc.oneof(fc.constant('172.30.0.1'), anyIp), port }),
    hostAccess: fc.array(
      fc.tuple(anyIp, port).map(([a, p]) => `${a}:${p}`),
      { maxLength: 2 },
    ),
    policy,
  })
  .map((r) => req(r));
const packet = fc.record({
  daddr: anyIp,
  proto: fc.constantFrom('tcp' as const, 'udp' as const, 'icmp' as const),
  dport: port,
});

/** Is `p` explicitly admitted by something the request declares (forward direction)? */
function declaredForward(r: AgentRuleRequest, p: Packet): boolean {
  if (p.daddr === r.orchestrator.address && p.proto === 'tcp' && p.dport === r.orchestrator.port) return true;
  if ((r.policy?.allowlist ?? []).some((c) => inCidr(p.daddr, c))) return true;
  return resolveHostAccess(r, spec).some(
    (e) =>
      e.address !== '*' &&
      inCidr(p.daddr, e.address) &&
      (e.port === '*' || (p.proto !== 'icmp' && p.dport === e.port)),
  );
}

describe('nft rule generation', () => {
  it('property: a private, CGNAT or link-local destination is dropped unless the request admits it', () => {
    fc.assert(
      fc.property(
        request,
        privateIp,
        fc.constantFrom('tcp' as const, 'udp' as const),
        port,
        (r, daddr, proto, dport) => {
          const p = { daddr, proto, dport };
          expect(verdicts(r, p).fwd).toBe(declaredForward(r, p) ? 'accept' : 'drop');
        },
      ),
      { numRuns: 400 },
    );
  });

  it('property: the orchestrator address and port is always accepted, forwarded or to the host', () => {
    fc.assert(
      fc.property(request, (r) => {
        const v = verdicts(r, { daddr: r.orchestrator.address, proto: 'tcp', dport: r.orchestrator.port });
        expect(v).toEqual({ fwd: 'accept', input: 'accept' });
      }),
      { numRuns: 300 },
    );
  });

  it('property: denyAll drops every destination nothing admits; without it public addresses pass', () => {
    fc.assert(
      fc.property(request, packet, (r, p) => {
        const v = verdicts(r, p).fwd;
        if (declaredForward(r, p)) expect(v).toBe('accept');
        else if (r.policy?.denyAll || BLOCKED_RANGES.some((c) => inCidr(p.daddr, c))) expect(v).toBe('drop');
        else expect(v).toBe('accept');
      }),
      { numRuns: 500 },
    );
  });

  it('property: traffic to the host itself is dropped unless it is the orchestrator or a hostAccess entry', () => {
    fc.assert(
      fc.property(request, packet, (r, p) => {
        const admitted =
          (p.daddr === r.orchestrator.address && p.proto === 'tcp' && p.dport === r.orchestrator.port) ||
          resolveHostAccess(r, spec).some(
            (e) =>
              (e.address === '*' || inCidr(p.daddr, e.address)) &&
              (e.port === '*' || (p.proto !== 'icmp' && p.dport === e.port)),
          );
        expect(verdicts(r, p).input).toBe(admitted ? 'accept' : 'drop');
      }),
      { numRuns: 500 },
    );
  });

  it('property: the batches for one address touch only that address', () => {
    fc.assert(
      fc.property(request, agentIp, (r, other) => {
        for (const cmds of [applyCommands(r, spec), removeCommands(r.ip, spec)]) {
          const t = touchedNames(cmds);
          expect(t.elements).toEqual([r.ip]);
          for (const c of t.chains) expect(ipOfChain(c)).toBe(r.ip);
          if (other !== r.ip) {
            const o = chainNames(other);
            expect(t.chains).not.toContain(o.fwd);
            expect(t.chains).not.toContain(o.input);
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it('default host set: DNS on the gateway and the host services; a declared hostAccess replaces it', () => {
    const dflt = req({ hostAccess: ['172.30.0.1:9000'] });
    expect(verdicts(dflt, { daddr: '172.30.0.1', proto: 'udp', dport: 53 }).input).toBe('accept');
    expect(verdicts(dflt, { daddr: '172.30.0.1', proto: 'tcp', dport: 9000 }).input).toBe('accept');
    expect(verdicts(dflt, { daddr: '172.30.0.1', proto: 'tcp', dport: 22 }).input).toBe('drop');
    // The orchestrator's port on any of the host's addresses (the agent may be pointed at another one).
    expect(verdicts(dflt, { daddr: '10.5.0.1', proto: 'tcp', dport: 8080 }).input).toBe('accept');
    const declared = req({
      hostAccess: ['172.30.0.1:9000'],
      policy: { denyAll: false, hostAccess: ['5432'] },
    });
    expect(verdicts(declared, { daddr: '172.30.0.1', proto: 'udp', dport: 53 }).input).toBe('drop');
    expect(verdicts(declared, { daddr: '172.30.0.1', proto: 'tcp', dport: 9000 }).input).toBe('drop');
    expect(verdicts(declared, { daddr: '10.9.9.9', proto: 'tcp', dport: 5432 }).input).toBe('accept');
    const none = req({ policy: { denyAll: false, hostAccess: [] } });
    expect(verdicts(none, { daddr: '172.30.0.1', proto: 'udp', dport: 53 }).input).toBe('drop');
    expect(verdicts(none, { daddr: '172.30.0.1', proto: 'tcp', dport: 8080 }).input).toBe('accept');
  });

  it('cloud metadata and the agents own subnet are blocked; an allowlisted CIDR is not', () => {
    const r = req({ policy: { denyAll: false, allowlist: ['10.1.2.0/24'] } });
    expect(verdicts(r, { daddr: '169.254.169.254', proto: 'tcp', dport: 80 }).fwd).toBe('drop');
    expect(verdicts(r, { daddr: '172.30.0.9', proto: 'tcp', dport: 80 }).fwd).toBe('drop');
    expect(verdicts(r, { daddr: '10.1.2.3', proto: 'tcp', dport: 80 }).fwd).toBe('accept');
    expect(verdicts(r, { daddr: '10.1.3.3', proto: 'tcp', dport: 80 }).fwd).toBe('drop');
  });

  it('apply flushes the address chains before adding, so a recycled address keeps no old accepts', () => {
    const cmds = applyCommands(req({ policy: { denyAll: false, allowlist: ['10.0.0.0/8'] } }), spec);
    const { fwd } = chainNames('172.30.0.5');
    const flushAt = cmds.findIndex((c) => (c.flush as { chain?: { name: string } })?.chain?.name === fwd);
    const firstRule = cmds.findIndex((c) => (c.add as { rule?: { chain: string } })?.rule?.chain === fwd);
    expect(flushAt).toBeGreaterThanOrEqual(0);
    expect(flushAt).toBeLessThan(firstRule);
  });

  it('base chains hook forward and input, accept replies first and dispatch by source address', () => {
    const cmds = baseCommands(spec);
    const chains = cmds.flatMap((c) => {
      const ch = (c.add as { chain?: { name: string; hook?: string } })?.chain;
      return ch?.hook ? [`${ch.name}:${ch.hook}`] : [];
    });
    expect(chains).toEqual(['forward:forward', 'input:input']);
    for (const chain of ['forward', 'input']) {
      const rules = chainRules(cmds, chain);
      expect(JSON.stringify(rules[0])).toContain('established');
      expect(JSON.stringify(rules[1])).toContain('@agent_');
    }
  });

  it('property: an address of the subnet with no rules of its own reaches nothing, forwarded or to the host', () => {
    fc.assert(
      fc.property(request, agentIp, packet, (r, other, p) => {
        fc.pre(other !== r.ip);
        // The table as it stands with one agent's rules in force: another address has none yet.
        const cmds = [...baseCommands(spec), ...applyCommands(r, spec)];
        for (const base of ['forward', 'input'] as const)
          expect(evaluateBase(cmds, base, { ...p, saddr: other })).toBe('reject');
      }),
      { numRuns: 300 },
    );
  });

  it("property: through the base chains, an agent with rules gets exactly its own chain's verdict", () => {
    fc.assert(
      fc.property(request, packet, (r, p) => {
        const cmds = [...baseCommands(spec), ...applyCommands(r, spec)];
        const own = verdicts(r, p);
        // Every address chain ends in a verdict: nothing of a ruled agent reaches the refusal.
        expect(own.fwd).not.toBe('fallthrough');
        expect(own.input).not.toBe('fallthrough');
        expect(evaluateBase(cmds, 'forward', { ...p, saddr: r.ip })).toBe(own.fwd);
        expect(evaluateBase(cmds, 'input', { ...p, saddr: r.ip })).toBe(own.input);
      }),
      { numRuns: 300 },
    );
  });

  it('after its rules are removed, an address is refused again (not let through)', () => {
    const r = req();
    const cmds = [...baseCommands(spec), ...applyCommands(r, spec), ...removeCommands(r.ip, spec)];
    const p = {
      saddr: r.ip,
      daddr: r.orchestrator.address,
      proto: 'tcp' as const,
      dport: r.orchestrator.port,
    };
    expect(evaluateBase(cmds, 'input', p)).toBe('reject');
    expect(evaluateBase(cmds, 'forward', { ...p, daddr: '203.0.113.9' })).toBe('reject');
  });

  it("packets from outside the agents' subnet are not ours to judge", () => {
    const cmds = baseCommands(spec);
    for (const base of ['forward', 'input'] as const)
      expect(
        evaluateBase(cmds, base, { saddr: '192.0.2.7', daddr: '203.0.113.9', proto: 'tcp', dport: 443 }),
      ).toBe('accept');
  });

  it('chain names round-trip to the address and ignore foreign chains', () => {
    fc.assert(
      fc.property(agentIp, (ip) => {
        const { fwd, input } = chainNames(ip);
        expect(ipOfChain(fwd)).toBe(ip);
        expect(ipOfChain(input)).toBe(ip);
      }),
    );
    expect(ipOfChain('forward')).toBeUndefined();
    expect(ipOfChain('kf_not_an_ip')).toBeUndefined();
  });
});
