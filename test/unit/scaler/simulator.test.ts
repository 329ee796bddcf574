import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { scalerFileSchema, type ScalerConfig } from '../../../src/config/index.js';
import { EventQueue } from '../../../src/scaler/sim/event-queue.js';
import { renderChart } from '../../../src/scaler/sim/chart.js';
import { renderComparison, runSimulation } from '../../../src/scaler/sim/report.js';
import { simulate } from '../../../src/scaler/sim/simulate.js';
import { formatTraceLine, parseTrace, TraceError, type TraceJob } from '../../../src/scaler/sim/trace.js';

function config(
  over: { maxAgents?: number; global?: number; cap?: number; warm?: number } = {},
): ScalerConfig {
  return scalerFileSchema.parse({
    version: 1,
    globalMaxAgents: over.global ?? 50,
    scalers: [
      {
        name: 'bm',
        type: 'bare-metal',
        maxAgents: over.maxAgents ?? 2,
        ...(over.cap !== undefined ? { resourceCap: { maxCpu: over.cap } } : {}),
        ...(over.warm ? { warmPool: { enabled: true, size: over.warm } } : {}),
        labelSets: [
          {
            labels: ['linux', 'small'],
            binaryPath: '/bin/agent',
            resources: { requests: { cpus: 1, memory: '1g' } },
          },
          {
            labels: ['linux', 'large'],
            binaryPath: '/bin/agent',
            resources: { requests: { cpus: 2, memory: '2g' } },
          },
        ],
      },
      { name: 'ct', type: 'container', maxAgents: 3, labelSets: [{ labels: ['docker'], image: 'agent:1' }] },
    ],
  });
}

const job = (submitMs: number, labels: string[], runMs: number): TraceJob => ({
  submitMs,
  labels,
  runMs,
  queueWaitMs: null,
});
const spawnMs = { 'bare-metal': 100, container: 300 };

describe('what-if simulator', () => {
  it('queues on maxAgents: the third job waits for a finished one, plus a spawn', () => {
    const trace = [
      job(0, ['linux', 'small'], 1000),
      job(0, ['linux', 'small'], 1000),
      job(0, ['linux', 'small'], 1000),
    ];
    const r = runSimulation(config({ maxAgents: 2 }), trace, { spawnMs });
    const p = r.pools.find((x) => x.key === 'bm/linux,small')!;
    expect(p.jobs).toBe(3);
    expect(p.waitP50Ms).toBe(100);
    expect(p.waitP99Ms).toBe(1200); // waited for a job (100 + 1000), then for its own spawn
    expect(p.peakAgents).toBe(2);
    expect(p.spawns).toBe(3);
    expect(p.capDelayedJobs).toBe(1);
    expect(r.totals.agentHours).toBeCloseTo((3 * 1100) / 3_600_000, 3);
  });

  it('a warm agent starts a job with no spawn wait, and the pool refills', () => {
    const trace = [job(10_000, ['linux', 'small'], 500), job(20_000, ['linux', 'small'], 500)];
    const r = runSimulation(config({ warm: 1, maxAgents: 4 }), trace, { spawnMs });
    const p = r.pools.find((x) => x.key === 'bm/linux,small')!;
    expect(p.waitP99Ms).toBe(0);
    expect(p.spawns).toBe(0);
    expect(p.warmSpawns).toBeGreaterThanOrEqual(3);
  });

  it('honours a warm-pool schedule: warm during the scheduled hours, cold and empty outside them', () => {
    const base = config({ maxAgents: 4 });
    const scheduled: ScalerConfig = {
      ...base,
      scalers: base.scalers.map((e) =>
        e.name === 'bm'
          ? {
              ...e,
              warmPool: {
                enabled: true,
                size: 0,
                idleTimeoutSeconds: 300,
                schedule: [
                  { cron: '0 8 * * *', size: 1, timezone: 'UTC' },
                  { cron: '0 18 * * *', size: 0, timezone: 'UTC' },
                ],
              },
            }
          : e,
      ),
    };
    const h = (iso: string) => Date.parse(`2027-03-01T${iso}Z`);
    const trace = [
      job(h('07:00:00'), ['docker'], 1000), // before the pool's hours: nothing is warm for anyone
      job(h('09:00:00'), ['linux', 'small'], 1000), // a warm hit
      job(h('20:00:00'), ['linux', 'small'], 1000), // after 18:00 the pool is empty: a cold spawn
    ];
    const r = runSimulation(scheduled, trace, { spawnMs });
    const small = r.pools.find((x) => x.key === 'bm/linux,small')!;
    expect(small.waitP50Ms).toBe(0);
    expect(small.waitP99Ms).toBe(100);
    expect(small.spawns).toBe(1);
    // Warm stock exists only from 08:00 to 18:00, one agent per label set (small and large): about
    // 2 x 10 h, plus the jobs' own short agents. Unscheduled (size 1 all day) it would be 2 x 13 h.
    expect(r.totals.agentHours).toBeGreaterThan(19.9);
    expect(r.totals.agentHours).toBeLessThan(20.2);
    const plain = runSimulation(config({ maxAgents: 4, warm: 1 }), trace, { spawnMs });
    expect(plain.totals.agentHours).toBeGreaterThan(25.9);
  });

  it('a job no label set serves is counted unserved; a job that never ran is skipped', () => {
    const trace = [job(0, ['gpu'], 10), { ...job(0, ['docker'], 10), runMs: null }];
    const r = runSimulation(config(), trace, { spawnMs });
    expect(r.jobs).toEqual({ replayed: 0, skipped: 1, unserved: 1 });
  });

  it('compares two configs and draws a chart', () => {
    const trace = Array.from({ length: 20 }, (_, i) => job(i * 10, ['linux', 'small'], 1000));
    const cur = runSimulation(config({ maxAgents: 2 }), trace, { spawnMs, cost: { 'linux,small': 2 } });
    const prop = runSimulation(config({ maxAgents: 8 }), trace, { spawnMs, cost: { 'linux,small': 2 } });
    const small = (r: typeof cur) => r.pools.find((x) => x.key === 'bm/linux,small')!;
    expect(small(prop).waitP95Ms).toBeLessThan(small(cur).waitP95Ms);
    const text = renderComparison(prop, cur);
    expect(text).toMatch(/bm\/linux,small\s+WAIT P95\s+\d+\s+\d+\s+-\d+/);
    expect(text).toMatch(/COST/);
    const svg = renderChart(prop, cur);
    expect(svg).toMatch(/^<svg/);
    expect(svg).toContain('polyline');
  });

  it('asks for a spawn time per backend, naming the flag', () => {
    expect(() => runSimulation(config(), [], { spawnMs: { 'bare-metal': 1 } })).toThrow(
      /--spawn-ms container=<ms>/,
    );
  });
});

describe('trace format', () => {
  it('round-trips a line and sorts by submission time', () => {
    const j: TraceJob = {
      ...job(Date.UTC(2026, 0, 1), ['linux'], 5),
      queueWaitMs: 3,
      result: 'succeeded',
      backend: 'bare-metal',
      priority: 2,
      owner: 'a',
    };
    const text = `${formatTraceLine({ ...j, submitMs: j.submitMs + 1 })}\n# comment\n\n${formatTraceLine(j)}\n`;
    expect(parseTrace(text)).toEqual([j, { ...j, submitMs: j.submitMs + 1 }]);
  });

  it('names the line and field of a mistake', () => {
    expect(() => parseTrace('{"submit":"x","labels":["a"]}', 'jobs.jsonl')).toThrow(
      /jobs.jsonl:1: field "submit"/,
    );
    expect(() => parseTrace('\n{"submit":1,"labels":[],"runMs":1}', 'f')).toThrow(/f:2: field "labels"/);
    expect(() => parseTrace('{"submit":1,"labels":["a"],"runMs":-1}')).toThrow(/field "runMs"/);
    expect(() => parseTrace('{"submit":1,"labels":["a"],"runms":1}')).toThrow(/unknown field "runms"/);
    expect(() => parseTrace('[1]')).toThrow(TraceError);
  });
});

describe('event queue', () => {
  it('pops in time order, insertion order on ties (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 20 }), { maxLength: 200 }), (times) => {
        const q = new EventQueue<number>();
        times.forEach((t, i) => q.push(t, i));
        const out: number[] = [];
        for (let e = q.pop(); e; e = q.pop()) out.push(e.item);
        const want = times
          .map((t, i) => ({ t, i }))
          .sort((a, b) => a.t - b.t || a.i - b.i)
          .map((x) => x.i);
        expect(out).toEqual(want);
      }),
    );
  });
});

describe('simulator invariants (property)', () => {
  const arbJob = fc.record({
    at: fc.integer({ min: 0, max: 60_000 }),
    set: fc.constantFrom(['linux', 'small'], ['linux', 'large'], ['docker'], ['linux']),
    runMs: fc.integer({ min: 0, max: 20_000 }),
    cpus: fc.option(fc.constantFrom(0.5, 1, 3), { nil: undefined }),
  });
  const arbConfig = fc.record({
    maxAgents: fc.integer({ min: 1, max: 6 }),
    global: fc.integer({ min: 1, max: 8 }),
    cap: fc.option(fc.constantFrom(2, 3.5, 6), { nil: undefined }),
    warm: fc.integer({ min: 0, max: 3 }),
  });

  it('never exceeds a cap, and the same inputs give the same output', () => {
    fc.assert(
      fc.property(
        fc.array(arbJob, { maxLength: 60 }),
        arbConfig,
        fc.integer({ min: 0, max: 2000 }),
        (js, c, spawn) => {
          const cfg = config(c);
          const trace = parseTrace(
            js
              .map((j) =>
                formatTraceLine({
                  ...job(j.at, [...j.set], j.runMs),
                  ...(j.cpus ? { resources: { requests: { cpus: j.cpus }, limits: { cpus: j.cpus } } } : {}),
                }),
              )
              .join('\n'),
          );
          const opts = { spawnMs: () => spawn };
          const a = simulate(cfg, trace, opts);
          expect(a.globalPeak.agents).toBeLessThanOrEqual(c.global);
          for (const e of cfg.scalers) {
            const pk = a.scalerPeaks[e.name];
            if (!pk) continue;
            expect(pk.agents).toBeLessThanOrEqual(e.maxAgents);
            if (e.resourceCap?.maxCpu !== undefined)
              expect(pk.cpus).toBeLessThanOrEqual(e.resourceCap.maxCpu + 1e-9);
          }
          expect(a.replayed + a.skipped + a.unserved).toBe(trace.length);
          const b = simulate(cfg, trace, opts);
          expect(JSON.stringify({ ...b, timeline: b.timeline.view() })).toBe(
            JSON.stringify({ ...a, timeline: a.timeline.view() }),
          );
        },
      ),
      { numRuns: 150 },
    );
  });
});
