import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import { hasRegistered } from '../scaler/agent-lifecycle.js';
import { swallowedCounts } from '../util/swallowed-errors.js';

/** Prometheus metrics. Gauges are refreshed from live state on each scrape; counters are bumped in place. */
export class Metrics {
  readonly registry = new Registry();
  readonly jobsQueued = new Gauge({
    name: 'kici_orch_jobs_queued',
    help: 'Jobs waiting for an agent',
    registers: [this.registry],
  });
  readonly jobsActive = new Gauge({
    name: 'kici_orch_jobs_active',
    help: 'Jobs dispatched or running',
    registers: [this.registry],
  });
  readonly agentsConnected = new Gauge({
    name: 'kici_orch_agents_connected',
    help: 'Connected agents',
    labelNames: ['kind'],
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
    help: 'Summed CPU requests of reservations',
    labelNames: ['scaler', 'scalerType'],
    registers: [this.registry],
  });
  readonly memoryUsed = new Gauge({
    name: 'kici_orch_scaler_memory_bytes_used',
    help: 'Summed memory requests of reservations',
    labelNames: ['scaler', 'scalerType'],
    registers: [this.registry],
  });
  readonly spawnFailures = new Counter({
    name: 'kici_orch_scaler_spawn_failures_total',
    help: 'Failed spawns',
    labelNames: ['backend', 'bound', 'kind'],
    registers: [this.registry],
  });
  readonly configReloads = new Counter({
    name: 'kici_orch_scaler_config_reloads_total',
    help: 'Scaler config reloads',
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

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'kici_orch_process_' });
  }

  refresh(d: Dispatcher): void {
    this.jobsQueued.set(d.queue.size);
    this.jobsActive.set(d.active.size);
    const kinds = { static: 0, scaler: 0 };
    for (const a of d.registry.list()) kinds[a.kind]++;
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
    for (const s of scaler.config.scalers) {
      const u = book.usage(s.name);
      this.cpusUsed.set({ scaler: s.name, scalerType: s.type }, u.cpus);
      this.memoryUsed.set({ scaler: s.name, scalerType: s.type }, u.memBytes);
    }
    const g = book.usage();
    this.cpusUsed.set({ scaler: '__global__', scalerType: '__global__' }, g.cpus);
    this.memoryUsed.set({ scaler: '__global__', scalerType: '__global__' }, g.memBytes);
  }
}
