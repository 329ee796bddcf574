/**
 * The planner reads a group's jobs only to hand one out: with nothing in flight, a group that only
 * waits (at a cap, say) is decided from its size, and its jobs are never read (the largest cost per
 * group of a pass over a long queue). With jobs in flight it reads them, to skip those.
 */
import { describe, expect, it } from 'vitest';
import { scalerFileSchema } from '../../../src/config/index.js';
import { CapBook } from '../../../src/scaler/core/caps.js';
import { planReconcile, type PlanGroup } from '../../../src/scaler/core/plan.js';
import { buildRoutingTable } from '../../../src/scaler/core/routing.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const table = buildRoutingTable(
  scalerFileSchema.parse({ version: 1, scalers: [bareMetal('bm', [['linux']], { maxAgents: 1 })] }),
  { host: { os: 'linux', arch: 'x64' } },
);

/** A group of `size` jobs that counts how often its jobs are read. */
function group(key: string, size: number) {
  const ids = Array.from({ length: size }, (_, i) => `${key}-${i}`);
  const g = {
    key,
    labels: ['linux'],
    size,
    reads: 0,
    jobIds: () => {
      g.reads++;
      return ids;
    },
  } satisfies PlanGroup & { reads: number };
  return g;
}

function plan(groups: PlanGroup[], inFlight: ReadonlySet<string>) {
  return planReconcile({
    groups,
    idleAgents: [],
    canRun: () => false,
    table,
    caps: new CapBook({ globalMaxAgents: 10, scalers: new Map([['bm', { maxAgents: 1 }]]) }),
    live: { global: 0, perScaler: new Map() },
    backoff: () => ({ blocked: false }),
    isProvisioning: (id) => inFlight.has(id),
    noneProvisioning: inFlight.size === 0,
    requestsFor: () => ({ cpus: 0, memBytes: 0 }),
    scaling: true,
  });
}

describe("the planner's reads of a group's jobs", () => {
  it('with nothing in flight, reads only the group that gets an agent', () => {
    const [first, second] = [group('a', 3), group('b', 2)];
    const [da, db] = plan([first, second], new Set());
    // The cap (1) lets one agent be started: for the first group's first job.
    expect(da!.spawn.map((s) => s.jobId)).toEqual(['a-0']);
    expect(da!.waiting).toBe(2);
    expect(db!.spawn).toEqual([]);
    expect(db!.action).toBe('at-capacity');
    expect(db!.waiting).toBe(2);
    expect(first.reads).toBe(1);
    expect(second.reads).toBe(0);
  });

  it('with a job in flight, skips it, and reads the groups to find it', () => {
    const [first, second] = [group('a', 3), group('b', 2)];
    const [da, db] = plan([first, second], new Set(['a-0']));
    expect(da!.spawn.map((s) => s.jobId)).toEqual(['a-1']);
    expect(da!.waiting).toBe(1);
    expect(db!.waiting).toBe(2);
    expect(second.reads).toBe(1);
  });
});
