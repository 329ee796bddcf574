import { Counter, Gauge, type Registry } from 'prom-client';
import { isWarmStock } from '../scaler/agent-book.js';
import { isPending } from '../scaler/agent-lifecycle.js';
import type { EventProvisionReaper } from '../scaler/event-reaper.js';
import type { ScalerManager } from '../scaler/manager.js';
import type { ScalerTally } from '../scaler/tally.js';
import type { ScalerAuditor } from '../scaler/audit/auditor.js';

/** Where the scaler figures are read from at scrape time; either may be absent. */
export interface ScalerSources {
  scaler: () => ScalerManager | undefined;
  reaper: () => EventProvisionReaper | undefined;
  auditor?: () => ScalerAuditor | undefined;
}

/**
 * Scaler metrics read from live state or from the scaler's tally on each scrape: refusals,
 * cap-lock failures, re-dispatch, warm pools, caps against their maximum, and the event reaper.
 */
export function registerScalerMetrics(registry: Registry, src: ScalerSources): void {
  const registers = [registry];
  const tally = (): ScalerTally | undefined => src.scaler()?.state.tally;
  new Gauge({
    name: 'kici_orch_scaler_audit_drift',
    help: 'Drift the last scaler audit found, by kind: missing_compute (a record with nothing behind it), unrecorded_compute (compute, a TAP or rules no record accounts for), orphan_token',
    labelNames: ['kind'],
    registers,
    collect() {
      this.reset();
      const counts = src.auditor?.()?.lastCounts();
      if (!counts) return;
      for (const [kind, n] of counts) this.set({ kind: kind.replace('-', '_') }, n);
    },
  });
  new Counter({
    name: 'kici_orch_scaler_spawn_refusals_total',
    help: 'Spawns a cap (count or resources, per scaler or global) turned away',
    registers,
    collect() {
      this.reset();
      this.inc(tally()?.spawnRefusals ?? 0);
    },
  });
  new Counter({
    name: 'kici_orch_scaler_cap_lock_failures_total',
    help: 'Cluster-wide cap-lock attempts that failed: contended (lock timeout) or unreachable (store)',
    labelNames: ['reason'],
    registers,
    collect() {
      this.reset();
      const f = tally()?.capLockFailures ?? { contended: 0, unreachable: 0 };
      this.inc({ reason: 'contended' }, f.contended);
      this.inc({ reason: 'unreachable' }, f.unreachable);
    },
  });
  new Counter({
    name: 'kici_orch_scaler_redispatch_total',
    help: 'Queue re-drives: hook when capacity was freed, sweep from the periodic retry',
    labelNames: ['trigger'],
    registers,
    collect() {
      this.reset();
      const r = tally()?.redispatch ?? { hook: 0, sweep: 0 };
      this.inc({ trigger: 'hook' }, r.hook);
      this.inc({ trigger: 'sweep' }, r.sweep);
    },
  });
  for (const [suffix, help, pick] of [
    ['spawns', 'Warm agents a pool started', (t: ScalerTally) => t.warmSpawns],
    ['reaped', 'Idle warm agents a pool reaped past its need', (t: ScalerTally) => t.warmReaped],
  ] as const) {
    new Counter({
      name: `kici_orch_scaler_warm_pool_${suffix}_total`,
      help,
      labelNames: ['scaler'],
      registers,
      collect() {
        this.reset();
        const m = src.scaler();
        if (!m) return;
        // Every warm-pool scaler has a series, zero until its first spawn or reap.
        for (const s of m.warm.specs()) this.inc({ scaler: s.scalerName }, 0);
        for (const [scaler, n] of pick(m.state.tally)) this.inc({ scaler }, n);
      },
    });
  }
  const warm = (name: string, help: string, value: (m: ScalerManager, key: string) => number) =>
    new Gauge({
      name: `kici_orch_scaler_warm_pool_${name}`,
      help,
      labelNames: ['scaler', 'label_set'],
      registers,
      collect() {
        this.reset();
        const m = src.scaler();
        for (const s of m?.warm.specs() ?? [])
          this.set({ scaler: s.scalerName, label_set: s.labelSetKey }, value(m!, s.key));
      },
    });
  const spec = (m: ScalerManager, key: string) => m.warm.specs().find((s) => s.key === key)!;
  warm('target', 'Warm agents a pool keeps idle (its size)', (m, k) => spec(m, k).size);
  warm(
    'ready',
    'Registered idle warm agents a job could take now',
    (m, k) => m.warm.ready(spec(m, k)).length,
  );
  warm('in_flight', 'Warm agents of a pool still spawning', (m, k) => {
    const s = spec(m, k);
    return m.state
      .agentsOf(s.scalerName)
      .filter((a) => isWarmStock(a) && a.labelSetKey === s.labelSetKey && isPending(a.phase)).length;
  });
  const capLabels = ['scaler', 'backend', 'resource'];
  new Gauge({
    name: 'kici_orch_scaler_cap_max',
    help: 'A configured cap of one scaler: agents (maxAgents), cpus or memory_bytes (resourceCap)',
    labelNames: capLabels,
    registers,
    collect() {
      this.reset();
      for (const e of src.scaler()?.config.scalers ?? []) {
        const at = { scaler: e.name, backend: e.type };
        this.set({ ...at, resource: 'agents' }, e.maxAgents);
        if (e.resourceCap?.maxCpu !== undefined) this.set({ ...at, resource: 'cpus' }, e.resourceCap.maxCpu);
        if (e.resourceCap?.maxMemoryBytes !== undefined)
          this.set({ ...at, resource: 'memory_bytes' }, e.resourceCap.maxMemoryBytes);
      }
    },
  });
  new Gauge({
    name: 'kici_orch_scaler_cap_used',
    help: 'What counts against each cap of kici_orch_scaler_cap_max, same labels',
    labelNames: capLabels,
    registers,
    collect() {
      this.reset();
      const m = src.scaler();
      if (!m) return;
      const book = m.capBook();
      for (const e of m.config.scalers) {
        const at = { scaler: e.name, backend: e.type };
        const u = book.usage(e.name);
        this.set({ ...at, resource: 'agents' }, book.count(e.name));
        this.set({ ...at, resource: 'cpus' }, u.cpus);
        this.set({ ...at, resource: 'memory_bytes' }, u.memBytes);
      }
    },
  });
  new Gauge({
    name: 'kici_orch_scaler_reap_unseen_provisions',
    help: 'Event provisions the leader has not seen registered anywhere for at least the flap grace, at its last reaper pass',
    registers,
    collect() {
      this.set(src.reaper()?.unseenProvisions ?? 0);
    },
  });
  new Gauge({
    name: 'kici_orch_scaler_reap_blocked',
    help: '1 while the leader reaches none of the peers it knows and so reaps no event provision, else 0',
    registers,
    collect() {
      this.set(src.reaper()?.blocked ? 1 : 0);
    },
  });
}
