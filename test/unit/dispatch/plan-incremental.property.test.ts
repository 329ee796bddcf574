/**
 * The dispatcher's reconcile plan keeps state between passes: each queue group keeps its place in
 * the order, its planner view, and where it routes (with what one of its agents requests) per
 * routing table. For random queues changed between passes (jobs added and removed, groups emptied
 * and filled again, priorities) and random scaler configs changed by reload (a new routing table,
 * other caps and resources), that plan must equal the plan computed straight from the queue's jobs:
 * regrouped, sorted and routed afresh on every pass.
 */
import fc from 'fast-check';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { canonicalizeLabels, scalerFileSchema, type ScalerConfig } from '../../../src/config/index.js';
import { planDispatch, toScaleJob } from '../../../src/dispatch/dispatch-plan.js';
import { JobQueue, type QueuedJob } from '../../../src/dispatch/job-queue.js';
import { planReconcile, type PlanGroup } from '../../../src/scaler/core/plan.js';
import { ScalerManager } from '../../../src/scaler/manager.js';
import type { ScalerBackend } from '../../../src/scaler/types.js';
import { ManualClock } from '../../../src/util/clock.js';

type Of<T> = T extends fc.Arbitrary<infer V> ? V : never;

const LABELS = ['linux', 'fast', 'gpu', 'big', 'small'];

const labelSetArb = fc.record({
  labels: fc.subarray(LABELS, { minLength: 1, maxLength: 3 }),
  cpus: fc.option(fc.constantFrom(1, 2, 4), { nil: undefined }),
});
const configArb = fc.record({
  globalMaxAgents: fc.integer({ min: 1, max: 12 }),
  maxCpu: fc.option(fc.constantFrom(3, 8), { nil: undefined }),
  scalers: fc.array(
    fc.record({
      maxAgents: fc.integer({ min: 1, max: 5 }),
      labelSets: fc.array(labelSetArb, { minLength: 1, maxLength: 3 }),
      mandatory: fc.subarray(['gpu'], { maxLength: 1 }),
    }),
    { minLength: 1, maxLength: 3 },
  ),
});

/** Mostly a few label combinations, so that groups hold several jobs and empty and refill. */
const rarely = <T>(common: T, ...rare: T[]) =>
  fc.oneof({ arbitrary: fc.constant(common), weight: 6 }, { arbitrary: fc.constantFrom(...rare), weight: 1 });
const jobArb = fc.record({
  runsOn: fc.oneof(
    { arbitrary: fc.constantFrom(['small'], ['big'], ['gpu', 'small']), weight: 4 },
    { arbitrary: fc.subarray(LABELS, { minLength: 1, maxLength: 3 }), weight: 1 },
  ),
  role: rarely('execution' as const, 'build' as const),
  image: rarely(undefined, 'alpine'),
  exclude: rarely<string[]>([], ['GPU'], ['big ']),
  cpus: rarely(undefined, 1, 3),
  priority: rarely(0, 1, 2),
});

const opArb = fc.oneof(
  { arbitrary: jobArb.map((j) => ({ op: 'add' as const, j })), weight: 8 },
  { arbitrary: fc.nat().map((n) => ({ op: 'remove' as const, n })), weight: 5 },
  { arbitrary: fc.constant({ op: 'plan' as const }), weight: 3 },
  { arbitrary: configArb.map((c) => ({ op: 'reload' as const, c })), weight: 1 },
);

function scalerConfig(c: Of<typeof configArb>): ScalerConfig {
  return scalerFileSchema.parse({
    version: 1,
    globalMaxAgents: c.globalMaxAgents,
    ...(c.maxCpu !== undefined && { globalResourceCap: { maxCpu: c.maxCpu } }),
    scalers: c.scalers.map((s, i) => ({
      name: `s${i}`,
      type: 'bare-metal',
      maxAgents: s.maxAgents,
      mandatoryLabels: s.mandatory,
      // A mandatory label must be declared by every set; two sets of one scaler may not be equal.
      labelSets: [
        ...new Map(
          s.labelSets.map((ls) => {
            const labels = [...new Set([...s.mandatory, ...ls.labels])].sort();
            return [labels.join(), { labels, cpus: ls.cpus }] as const;
          }),
        ).values(),
      ].map((ls) => ({
        labels: ls.labels,
        binaryPath: '/opt/kici/agent',
        ...(ls.cpus !== undefined && { resources: { requests: { cpus: ls.cpus } } }),
      })),
    })),
  });
}

/** Backends that only answer what planning asks: how many agents each runs (none). */
function backendsFor(config: ScalerConfig): ScalerBackend[] {
  return config.scalers.map((e) => ({
    name: e.name,
    type: 'bare-metal' as const,
    capabilities: {
      localCompute: true,
      lifetime: 'orchestrator' as const,
      cleansOrphans: false,
      capturesLogs: false,
      peerAdoptable: false,
    },
    getActiveCount: () => 0,
    getRequiredTools: () => [],
    spawn: () => Promise.reject(new Error('planning never spawns')),
    destroy: async () => {},
    checkReload: () => ({ valid: true as const }),
    applyReload: () => {},
    shutdownAll: async () => {},
  }));
}

function queuedJob(seq: number, j: Of<typeof jobArb>): QueuedJob {
  const runsOn = canonicalizeLabels(j.runsOn);
  return {
    id: `j${seq}`,
    runId: 'r',
    name: `job-${seq}`,
    seq,
    runsOn,
    spec: {
      role: j.role,
      ...(j.image && { container: { image: j.image } }),
      ...(j.exclude.length && { excludeLabels: j.exclude }),
      ...(j.cpus !== undefined && { resources: { requests: { cpus: j.cpus } } }),
    },
    createdAtMs: seq,
    priority: j.priority,
  };
}

/**
 * The plan from scratch: every queued job regrouped by what makes jobs interchangeable, groups
 * ordered by their most urgent job, each routed through the table by `decide` itself.
 */
function straightPlan(queue: JobQueue, scaler: ScalerManager, now: number) {
  const byKey = new Map<string, QueuedJob[]>();
  for (const j of queue.all()) {
    const exclude = [...new Set((j.spec.excludeLabels ?? []).map((l) => l.trim().toLowerCase()))].sort();
    const key = JSON.stringify([
      j.runsOn,
      j.spec.role ?? 'execution',
      j.spec.container?.image ?? '',
      exclude,
      j.spec.resources ?? null,
    ]);
    byKey.set(key, [...(byKey.get(key) ?? []), j]);
  }
  const prio = (j: QueuedJob) => j.priority ?? 0;
  const groups = [...byKey].map(([key, jobs]) => {
    jobs.sort((a, b) => prio(b) - prio(a) || a.seq - b.seq);
    const sample = jobs[0]!;
    return {
      key,
      labels: sample.runsOn,
      role: sample.spec.role,
      exclude: sample.spec.excludeLabels ? canonicalizeLabels(sample.spec.excludeLabels) : undefined,
      image: sample.spec.container?.image,
      size: jobs.length,
      jobIds: () => jobs.map((j) => j.id),
      sample,
      top: Math.max(...jobs.map(prio)),
      oldest: Math.min(...jobs.map((j) => j.seq)),
    } satisfies PlanGroup & Record<string, unknown>;
  });
  groups.sort((a, b) => b.top - a.top || a.oldest - b.oldest);
  const facts = scaler.decisionState();
  return planReconcile({
    groups,
    idleAgents: [],
    canRun: () => false,
    table: scaler.routingTable(),
    caps: scaler.capBook(),
    live: {
      global: scaler.globalActiveCount(),
      perScaler: new Map(scaler.backendList().map((b) => [b.name, b.getActiveCount()])),
    },
    backoff: (key) => facts.backoff(key, now),
    isProvisioning: (id) => scaler.isProvisioning(id),
    requestsFor: (m, g) => scaler.resourcesFor(m, toScaleJob(g.sample)).requests,
    scaling: true,
    now,
    draining: facts.draining,
    hasBackend: facts.hasBackend,
    machinePool: facts.machinePool,
  });
}

describe('reconcile plan kept between passes', () => {
  it('equals the plan computed from scratch, pass after pass', async () => {
    let reloaded = 0;
    await fc.assert(
      fc.asyncProperty(configArb, fc.array(opArb, { minLength: 1, maxLength: 60 }), async (c0, ops) => {
        const clock = new ManualClock(1_000);
        const config = scalerConfig(c0);
        const scaler = new ScalerManager({
          config,
          backends: backendsFor(config),
          store: {} as never, // planning and this reload never touch the store
          clock,
          logger: pino({ level: 'silent' }),
          instanceId: 'test',
          orchestratorUrlFor: () => 'ws://x',
        });
        const queue = new JobQueue();
        let seq = 0;
        const check = () => {
          const { plan } = planDispatch(queue, [], scaler, clock.now());
          expect(plan).toEqual(straightPlan(queue, scaler, clock.now()));
        };
        for (const o of ops) {
          if (o.op === 'add') queue.add(queuedJob(seq++, o.j));
          else if (o.op === 'remove') {
            const all = queue.all();
            if (all.length) queue.remove(all[o.n % all.length]!.id);
          } else if (o.op === 'plan') check();
          else {
            const next = scalerConfig(o.c);
            const out = await scaler.reload(next, async (e) => backendsFor({ ...next, scalers: [e] })[0]!);
            // A rejected reload keeps the old config (and table); both are fine here.
            if (out.result !== 'rejected') reloaded++;
          }
        }
        check();
      }),
      { numRuns: 300 },
    );
    // The runs did change the routing table under kept groups.
    expect(reloaded).toBeGreaterThan(10);
  });

  it('a new routing table is routed afresh (a group keeps nothing from the old one)', () => {
    const config = scalerConfig({
      globalMaxAgents: 5,
      maxCpu: undefined,
      scalers: [{ maxAgents: 5, labelSets: [{ labels: ['linux'], cpus: undefined }], mandatory: [] }],
    });
    const scaler = new ScalerManager({
      config,
      backends: backendsFor(config),
      store: {} as never,
      clock: new ManualClock(0),
      logger: pino({ level: 'silent' }),
      instanceId: 'test',
      orchestratorUrlFor: () => 'ws://x',
    });
    const queue = new JobQueue();
    queue.add(
      queuedJob(0, {
        runsOn: ['linux'],
        role: 'execution',
        image: undefined,
        exclude: [],
        cpus: undefined,
        priority: 0,
      }),
    );
    expect(planDispatch(queue, [], scaler, 0).plan[0]!.action).toBe('spawn');
    // The same config under a new table: the group routes again (to an equal entry, a new object).
    scaler.state.refresh();
    const [d] = planDispatch(queue, [], scaler, 0).plan;
    expect(d!.match).toBe(scaler.routingTable()[0]);
  });
});
