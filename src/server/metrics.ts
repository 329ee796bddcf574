import { createRequire } from 'node:module';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import { normalizeLabelSet } from '../config/labels.js';
import { hasRegistered } from '../scaler/agent-lifecycle.js';
import { swallowedCounts } from '../util/swallowed-errors.js';

/** Seconds, from a fast warm hit to a slow image pull or a long job: 50 ms up to 10 min. */
export const SECONDS_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

/** Who ran a job: the scaler and its backend type, or `backend="static"` with an empty scaler. */
export interface RunnerLabels {
  scaler: string;
  backend: string;
}

function packageVersion(): string {
  try {
    const pkg = createRequire(import.meta.url)('../../package.json') as { version?: unknown };
    return typeof pkg.version === 'string' ? pkg.version : 'unknown';
  } catch {
    return 'unknown';
  }
}

/**
 * Prometheus metrics. Gauges are refreshed from live state on each scrape; counters and histograms
 * are bumped where the event happens. Per-scaler series carry only real scaler names; figures
 * over all scalers have their own metric names, so `sum()` over a per-scaler metric never counts
 * anything twice.
 */
export class Metrics {
  readonly registry = new Registry();
  readonly buildInfo = new Gauge({
    name: 'kici_orch_build_info',
    help: 'Always 1; the version label names the running build',
    labelNames: ['version'],
    registers: [this.registry],
  });
  readonly jobsQueued = new Gauge({
    name: 'kici_orch_jobs_queued',
    help: 'Jobs waiting for an agent, by their runs-on label set',
    labelNames: ['label_set'],
    registers: [this.registry],
  });
  readonly jobsActive = new Gauge({
    name: 'kici_orch_jobs_active',
    help: 'Jobs dispatched or running',
    registers: [this.registry],
  });
  readonly jobsFinished = new Counter({
    name: 'kici_orch_jobs_finished_total',
    help: 'Jobs that reached a final state, by that state',
    labelNames: ['result'],
    registers: [this.registry],
  });
  readonly queueWait = new Histogram({
    name: 'kici_orch_job_queue_wait_seconds',
    help: 'From submission to the agent reporting the job started',
    labelNames: ['scaler', 'backend'],
    buckets: SECONDS_BUCKETS,
    registers: [this.registry],
  });
  readonly jobDuration = new Histogram({
    name: 'kici_orch_job_duration_seconds',
    help: 'From the job starting to its result being stored',
    labelNames: ['scaler', 'backend', 'result'],
    buckets: SECONDS_BUCKETS,
    registers: [this.registry],
  });
  readonly spawnLatency = new Histogram({
    name: 'kici_orch_spawn_latency_seconds',
    help: 'From the scaler deciding to spawn an agent to that agent registering',
    labelNames: ['scaler', 'backend'],
    buckets: SECONDS_BUCKETS,
    registers: [this.registry],
  });
  readonly dispatchPasses = new Counter({
    name: 'kici_orch_dispatch_passes_total',
    help: 'Reconcile passes over the queue (each plans every queued job against the idle agents)',
    registers: [this.registry],
  });
  readonly dispatchPlanSeconds = new Counter({
    name: 'kici_orch_dispatch_plan_seconds_total',
    help: "Time the passes spent planning (synchronous, on the server's event loop)",
    registers: [this.registry],
  });
  readonly dispatchPassSeconds = new Counter({
    name: 'kici_orch_dispatch_pass_seconds_total',
    help: 'Wall time of the passes, with their claim statements',
    registers: [this.registry],
  });
  /** The dispatcher's totals at the last scrape: the counters move by the difference. */
  private passesSeen = { passes: 0, planMs: 0, passMs: 0 };
  readonly agentsConnected = new Gauge({
    name: 'kici_orch_agents_connected',
    help: 'Connected agents',
    labelNames: ['kind'],
    registers: [this.registry],
  });
  readonly agentTokensExpiring = new Gauge({
    name: 'kici_orch_agent_tokens_expiring',
    help: 'Live static agent tokens that expire within 14 days',
    registers: [this.registry],
  });
  readonly agents = new Gauge({
    name: 'kici_orch_agents',
    help: 'Connected agents by scaler, backend and state (idle, busy, draining)',
    labelNames: ['scaler', 'backend', 'state'],
    registers: [this.registry],
  });
  readonly scalerActive = new Gauge({
    name: 'kici_orch_scaler_agents',
    help: 'Agents a scaler holds compute for, by phase',
    labelNames: ['scaler', 'phase'],
    registers: [this.registry],
  });
  readonly cpusUsed = new Gauge({
    name: 'kici_orch_scaler_cpus_used',
    help: "Summed CPU requests of one scaler's reservations",
    labelNames: ['scaler', 'backend', 'scaler_type', 'machine_pool'],
    registers: [this.registry],
  });
  readonly memoryUsed = new Gauge({
    name: 'kici_orch_scaler_memory_bytes_used',
    help: "Summed memory requests of one scaler's reservations",
    labelNames: ['scaler', 'backend', 'scaler_type', 'machine_pool'],
    registers: [this.registry],
  });
  readonly agentsGlobal = new Gauge({
    name: 'kici_orch_agents_global',
    help: 'Agents held against globalMaxAgents (reservations over all scalers)',
    registers: [this.registry],
  });
  readonly cpusGlobal = new Gauge({
    name: 'kici_orch_global_cpus_used',
    help: 'Summed CPU requests of all reservations, the figure globalResourceCap checks',
    registers: [this.registry],
  });
  readonly memoryGlobal = new Gauge({
    name: 'kici_orch_global_memory_bytes_used',
    help: 'Summed memory requests of all reservations, the figure globalResourceCap checks',
    registers: [this.registry],
  });
  readonly spawnFailures = new Counter({
    name: 'kici_orch_scaler_spawn_failures_total',
    help: 'Failed spawns, by scaler, backend type, whether bound to a job, and failure kind',
    labelNames: ['scaler', 'backend', 'bound', 'kind'],
    registers: [this.registry],
  });
  readonly configReloads = new Counter({
    name: 'kici_orch_scaler_config_reloads_total',
    help: 'Scaler config reloads, by outcome (their sum is every attempt)',
    labelNames: ['result'],
    registers: [this.registry],
  });

  readonly swallowedErrors = new Counter({
    name: 'kici_orch_swallowed_errors_total',
    help: 'Errors logged and not propagated (best-effort writes, cleanup), by call site',
    labelNames: ['site'],
    registers: [this.registry],
    // Read from the process-wide tally on each scrape, so any module can count without a handle.
    collect() {
      this.reset();
      for (const [site, n] of swallowedCounts()) this.inc({ site }, n);
    },
  });

  /** Jobs that started, until they finish: when, and on what. */
  private readonly started = new Map<string, { atMs: number; runner: RunnerLabels }>();

  constructor(private readonly runnerOf: (agentId: string) => RunnerLabels = () => STATIC_RUNNER) {
    // prom-client's own names already start `process_` or `nodejs_`: the prefix is ours only.
    collectDefaultMetrics({ register: this.registry, prefix: 'kici_orch_' });
    // prom-client names three gauges `_total`, which reads as a counter (promtool flags it). Each
    // is the sum of a by-type gauge that stays (`…_active_handles{type}` and so on).
    for (const what of ['handles', 'requests', 'resources'])
      this.registry.removeSingleMetric(`kici_orch_nodejs_active_${what}_total`);
    this.buildInfo.set({ version: packageVersion() }, 1);
  }

  /** The agent reported the job started: its queue wait ends here. */
  jobStarted(jobId: string, agentId: string, submittedAtMs: number, nowMs: number): void {
    const runner = this.runnerOf(agentId);
    this.started.set(jobId, { atMs: nowMs, runner });
    this.queueWait.observe(runner, Math.max(0, nowMs - submittedAtMs) / 1000);
  }

  /** A job's final state was stored (once per job). */
  jobFinished(jobId: string, result: string, nowMs: number): void {
    this.jobsFinished.inc({ result });
    const s = this.started.get(jobId);
    if (!s) return;
    this.started.delete(jobId);
    this.jobDuration.observe({ ...s.runner, result }, Math.max(0, nowMs - s.atMs) / 1000);
  }

  spawnRegistered(runner: RunnerLabels, latencyMs: number): void {
    this.spawnLatency.observe(runner, Math.max(0, latencyMs) / 1000);
  }

  refresh(d: Dispatcher): void {
    this.jobsQueued.reset();
    for (const g of d.queue.orderedGroups())
      this.jobsQueued.inc({ label_set: normalizeLabelSet(g.labels) }, g.size);
    this.jobsActive.set(d.active.size);
    const p = d.passStats();
    this.dispatchPasses.inc(p.passes - this.passesSeen.passes);
    this.dispatchPlanSeconds.inc((p.planMs - this.passesSeen.planMs) / 1000);
    this.dispatchPassSeconds.inc((p.passMs - this.passesSeen.passMs) / 1000);
    this.passesSeen = p;
    const kinds = { static: 0, scaler: 0 };
    this.agents.reset();
    for (const s of ['idle', 'busy'] as const) this.agents.set({ ...STATIC_RUNNER, state: s }, 0);
    for (const a of d.registry.list()) {
      kinds[a.kind]++;
      const scalerName = a.scalerName ?? '';
      const backend =
        a.kind === 'static' ? 'static' : (d.scaler?.state.entries.get(scalerName)?.type ?? 'unknown');
      this.agents.inc({ scaler: scalerName, backend, state: d.registry.stateOf(a) });
    }
    this.agentsConnected.set({ kind: 'static' }, kinds.static);
    this.agentsConnected.set({ kind: 'scaler' }, kinds.scaler);
    const scaler = d.scaler;
    if (!scaler) return;
    this.scalerActive.reset();
    for (const e of scaler.entries()) {
      const phase = hasRegistered(e.phase) ? 'registered' : 'spawning';
      this.scalerActive.inc({ scaler: e.scalerName, phase });
    }
    const book = scaler.capBook();
    this.cpusUsed.reset();
    this.memoryUsed.reset();
    for (const s of scaler.config.scalers) {
      const u = book.usage(s.name);
      const at = { scaler: s.name, backend: s.type, scaler_type: s.type, machine_pool: s.machinePool ?? '' };
      this.cpusUsed.set(at, u.cpus);
      this.memoryUsed.set(at, u.memBytes);
    }
    const g = book.usage();
    this.agentsGlobal.set(book.count());
    this.cpusGlobal.set(g.cpus);
    this.memoryGlobal.set(g.memBytes);
  }
}

export const STATIC_RUNNER: RunnerLabels = Object.freeze({ scaler: '', backend: 'static' });
