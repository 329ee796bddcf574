/**
 * Our limits as systemd resource-control properties for `systemd-run --user --scope`: memory in
 * bytes with no swap, CPU as a whole percentage of one CPU (at least 1%), the same task cap the
 * cgroupfs writer sets, and a command line whose options all come before its `--`.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AGENT_PIDS_LIMIT } from '../../../../src/scaler/backends/bare-metal/cgroups.js';
import {
  cpuQuotaPercent,
  scopeCommand,
  scopeProperties,
  scopeUnitName,
} from '../../../../src/scaler/backends/bare-metal/scope-properties.js';

const limitsArb = fc.record({
  cpus: fc.oneof(fc.constant(0), fc.double({ min: 0.001, max: 512, noNaN: true })),
  memBytes: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 2 ** 50 })),
});

function parse(props: string[]): Map<string, string> {
  return new Map(props.map((p) => [p.slice(0, p.indexOf('=')), p.slice(p.indexOf('=') + 1)]));
}

describe('limits as systemd scope properties', () => {
  it('map each limit exactly: MemoryMax in bytes with MemorySwapMax=0, CPUQuota as rounded percent ≥ 1, TasksMax always', () => {
    fc.assert(
      fc.property(limitsArb, (limits) => {
        const p = parse(scopeProperties(limits));
        expect(p.get('TasksMax')).toBe(String(AGENT_PIDS_LIMIT));
        if (limits.memBytes > 0) {
          expect(p.get('MemoryMax')).toBe(String(limits.memBytes));
          expect(Number(p.get('MemoryMax'))).toBe(limits.memBytes);
          expect(p.get('MemorySwapMax')).toBe('0');
        } else {
          expect(p.has('MemoryMax')).toBe(false);
          expect(p.has('MemorySwapMax')).toBe(false);
        }
        if (limits.cpus > 0) {
          const quota = p.get('CPUQuota')!;
          expect(quota).toMatch(/^[1-9][0-9]*%$/);
          const pct = Number(quota.slice(0, -1));
          expect(pct).toBeGreaterThanOrEqual(1);
          // Percent of one CPU: within half a percent of the request, or the 1% floor.
          if (limits.cpus >= 0.01) expect(Math.abs(pct - limits.cpus * 100)).toBeLessThanOrEqual(0.5);
          else expect(pct).toBe(1);
        } else expect(p.has('CPUQuota')).toBe(false);
      }),
    );
  });

  it('CPUQuota is monotonic in the CPUs asked for', () => {
    fc.assert(
      fc.property(
        fc.double({ min: 0.001, max: 512, noNaN: true }),
        fc.double({ min: 0.001, max: 512, noNaN: true }),
        (a, b) => {
          const [lo, hi] = a <= b ? [a, b] : [b, a];
          expect(cpuQuotaPercent(lo)).toBeLessThanOrEqual(cpuQuotaPercent(hi));
        },
      ),
    );
    expect([0.5, 1, 1.5, 2, 0.004].map(cpuQuotaPercent)).toEqual([50, 100, 150, 200, 1]);
  });

  it('the command: --user --scope --quiet --collect, a unit per agent, each property after -p, then --', () => {
    fc.assert(
      fc.property(limitsArb, fc.stringMatching(/^[a-z0-9-]{1,40}$/), (limits, suffix) => {
        const id = `scaler-bare-metal-${suffix}`;
        const cmd = scopeCommand('/usr/bin/systemd-run', id, limits);
        expect(cmd.slice(0, 5)).toEqual([
          '/usr/bin/systemd-run',
          '--user',
          '--scope',
          '--quiet',
          '--collect',
        ]);
        expect(cmd).toContain(`--unit=kici-agent-${id}.scope`);
        expect(cmd.at(-1)).toBe('--');
        expect(cmd.filter((a) => a === '--')).toHaveLength(1);
        const props = cmd.flatMap((a, i) => (a === '-p' ? [cmd[i + 1]!] : []));
        expect(props).toEqual(scopeProperties(limits));
      }),
    );
  });

  it('a unit name systemd accepts, whatever the id', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1, maxLength: 60 }), (id) => {
        expect(scopeUnitName(id)).toMatch(/^kici-agent-[A-Za-z0-9:_.-]+\.scope$/);
      }),
    );
  });
});
