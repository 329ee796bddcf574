import { backoffKey } from '../scaler/core/backoff.js';
import { isWarmStock, phaseOf } from '../scaler/agent-book.js';
import { hasRegistered, isPending } from '../scaler/agent-lifecycle.js';
import { resolveResources } from '../scaler/core/resources.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { JobSpec } from '../jobs/run-spec.js';
import type { JobRow } from '../store/index.js';
import type { Clock } from '../util/clock.js';

/**
 * `kici-admin scaler status`: one row per scaler with counts, usage, caps, backoff and its agents.
 * A scaler removed by a reload stays listed, marked retiring, until its last agent is gone.
 */
export function describeScalerStatus(d: Dispatcher, clock: Clock) {
  const scaler = d.scaler;
  if (!scaler) return { configured: false, scalers: [] };
  const now = clock.now();
  const book = scaler.capBook();
  const entries = scaler.entries();
  const backoff = scaler.backoff.snapshot();
  return {
    configured: true,
    globalMaxAgents: scaler.config.globalMaxAgents,
    globalActive: scaler.globalActiveCount(),
    globalReserved: book.count(),
    globalUsage: book.usage(),
    globalResourceCap: scaler.config.globalResourceCap ?? null,
    scalers: scaler.scalerEntries().map(({ entry: s, retiringSinceMs }) => {
      const mine = entries.filter((e) => e.scalerName === s.name);
      const backend = scaler.backendList().find((b) => b.name === s.name);
      return {
        name: s.name,
        type: s.type,
        retiring: retiringSinceMs !== undefined,
        retiringForMs: retiringSinceMs === undefined ? null : Math.max(0, now - retiringSinceMs),
        active: backend?.getActiveCount() ?? 0,
        spawning: mine.filter((e) => isPending(e.phase)).length,
        registered: mine.filter((e) => hasRegistered(e.phase)).length,
        reserved: book.count(s.name),
        maxAgents: s.maxAgents,
        usage: book.usage(s.name),
        resourceCap: s.resourceCap ?? null,
        labelSets: s.labelSets.map((l) => l.labels),
        agents: mine.map((e) => ({
          agentId: e.agentId,
          phase: e.phase,
          labelSet: e.labelSetKey,
          boundJobId: e.boundJobId ?? null,
          warm: e.origin.warm,
        })),
        backoff: backoff
          .filter((b) => b.scalerName === s.name)
          .map((b) => ({
            labelSet: b.labelSetKey,
            consecutiveFailures: b.consecutive,
            retryInMs: Math.max(0, b.deferUntilMs - now),
            lastError: b.lastError ?? null,
          })),
        warmPool:
          s.warmPool?.enabled && retiringSinceMs === undefined
            ? {
                ...s.warmPool,
                pools: scaler.warm
                  .specs()
                  .filter((p) => p.scalerName === s.name)
                  .map((p) => ({
                    labelSet: p.labelSetKey,
                    target: p.size,
                    ready: scaler.warm.ready(p).length,
                    inFlight: mine.filter(
                      (e) => isWarmStock(e) && isPending(e.phase) && e.labelSetKey === p.labelSetKey,
                    ).length,
                  })),
              }
            : null,
      };
    }),
  };
}

/** `kici-admin scaler explain <job>`: the same checks the manager runs, read-only, in words. */
export function explainJob(d: Dispatcher, clock: Clock, row: JobRow) {
  const lines: string[] = [];
  const spec = row.spec as JobSpec;
  const base = { jobId: row.id, state: row.state, runsOn: row.runs_on };
  if (row.state !== 'queued') {
    lines.push(`job is ${row.state}${row.agent_id ? ` on agent ${row.agent_id}` : ''}; nothing to scale`);
    if (row.reason) lines.push(`reason: ${row.reason}`);
    return { ...base, lines };
  }
  const waiting = d.queue.get(row.id)?.waiting;
  if (waiting) lines.push(`waiting: ${waiting}`);
  const scaler = d.scaler;
  if (!scaler) {
    lines.push('no scaler is configured; only connected agents can take this job');
    return { ...base, lines };
  }
  const job = {
    runsOn: row.runs_on,
    role: spec.role,
    excludeLabels: spec.excludeLabels,
    container: spec.container,
  };
  const match = scaler.route(job);
  if (!match) {
    lines.push(scaler.noRouteReason(job));
    return { ...base, lines };
  }
  lines.push(
    `matched scaler "${match.scalerName}" label set [${match.key}]${match.gate.length ? ` (gate: ${match.gate.join(',')})` : ''}`,
  );
  const inFlight = scaler.entries().find((e) => e.boundJobId === row.id && isPending(e.phase));
  if (inFlight) {
    lines.push(`agent ${inFlight.agentId} is being provisioned for it (${phaseOf(inFlight)})`);
    return { ...base, matched: match.key, lines };
  }
  const held = scaler.backoff.check(backoffKey(match.scalerName, match.key), clock.now());
  if (held.blocked) lines.push(`backoff: ${held.reason}`);
  const entry = scaler.config.scalers.find((s) => s.name === match.scalerName)!;
  const res = resolveResources(
    spec.resources,
    entry.labelSets[match.index]?.resources,
    scaler.config.defaults?.resources,
  );
  const backend = scaler.backendList().find((b) => b.name === match.scalerName);
  const cap = scaler.capBook().check(match.scalerName, res.requests, {
    global: scaler.globalActiveCount(),
    scaler: backend?.getActiveCount() ?? 0,
  });
  lines.push(
    cap.ok
      ? `caps: room for one more agent (requests ${res.requests.cpus} cpu, ${res.requests.memBytes} bytes)`
      : `blocked by cap: ${cap.reason}`,
  );
  if (row.last_provisioning_error) lines.push(`last provisioning error: ${row.last_provisioning_error}`);
  return { ...base, matched: match.key, lines };
}
