import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { Clock } from '../util/clock.js';
import { describeScalerStatus } from './scaler-views.js';
import { preflightTools } from '../scaler/preflight.js';
import { limitsRows } from './limits-check.js';

import {
  type CheckStatus,
  SCALER_FAILURE_WINDOW_MS as FAILURE_WINDOW_MS,
  scalerProvisioningRows,
} from './scaler-provisioning-check.js';

export interface Finding {
  problem: string;
  fix: string;
}

/** What to do about each spawn failure kind (src/scaler/core/spawn-errors.ts). */
function fixForKind(kind: string, file: string): string {
  switch (kind) {
    case 'binary-missing':
      return `install the agent binary at the path named above, or fix binaryPath in ${file}`;
    case 'not-executable':
      return `make the agent binary executable (chmod +x), or point binaryPath in ${file} at the kici-agent executable`;
    case 'exited-before-register':
      return 'the agent process exited before it registered: its last lines are in the job\'s log and in the orchestrator log ("agent output"); check KICI_ORCHESTRATOR_URL and the agent\'s environment';
    case 'spawn-timeout':
      return 'the agent did not register within the spawn timeout: check that it can reach the orchestrator URL';
    case 'config':
      return `fix the scaler entry in ${file}, then run \`kici-admin scaler reload\``;
    default:
      return 'see the last message; the orchestrator log has the full error';
  }
}

/**
 * `kici-admin diagnose`: per scaler, what is wrong and what to do about it. Built from the same state
 * `scaler status` shows, plus recent classified failures and a check of the tools each scaler needs.
 */
export async function diagnoseScalers(
  d: Dispatcher,
  clock: Clock,
  configPath: string | undefined,
  /** The VM bridge and its NAT and isolation rules, when a VM scaler is configured. */
  networkCheck?: () => Promise<{ name: string; status: CheckStatus; message: string } | undefined>,
) {
  const scaler = d.scaler;
  if (!scaler)
    return {
      configured: false,
      healthy: true,
      scalers: [],
      checks: scalerProvisioningRows([], [], clock.now()),
    };
  const now = clock.now();
  const file = configPath ?? 'the scaler config file';
  const status = describeScalerStatus(d, clock);
  const records = scaler.failures.records().filter((r) => r.atMs > now - FAILURE_WINDOW_MS);
  const scalers = await Promise.all(
    scaler.config.scalers.map(async (entry) => {
      const row = status.scalers.find((s) => s.name === entry.name)!;
      const backend = scaler.backendList().find((b) => b.name === entry.name);
      const findings: Finding[] = [];

      const byKind = new Map<
        string,
        { kind: string; count: number; lastMessage: string; lastAtMs: number }
      >();
      for (const r of records.filter((x) => x.scalerName === entry.name)) {
        const k = byKind.get(r.kind) ?? { kind: r.kind, count: 0, lastMessage: r.detail, lastAtMs: r.atMs };
        k.count++;
        if (r.atMs >= k.lastAtMs) Object.assign(k, { lastMessage: r.detail, lastAtMs: r.atMs });
        byKind.set(r.kind, k);
      }
      const failures = [...byKind.values()].map((f) => ({
        kind: f.kind,
        count: f.count,
        lastMessage: f.lastMessage,
        lastAt: new Date(f.lastAtMs).toISOString(),
        fix: fixForKind(f.kind, file),
      }));

      const backoff = row.backoff.map((b) => ({
        ...b,
        active: b.retryInMs > 0,
        liftsAt: b.retryInMs > 0 ? new Date(now + b.retryInMs).toISOString() : null,
      }));
      for (const b of backoff.filter((x) => x.consecutiveFailures > 0)) {
        const last = b.lastError ? `${b.lastError.kind}: ${b.lastError.message}` : 'unknown';
        findings.push({
          problem: `label set [${b.labelSet}] failed to start an agent ${b.consecutiveFailures} time(s) in a row (last: ${last})${b.liftsAt ? `; backed off until ${b.liftsAt}` : ''}`,
          fix: fixForKind(b.lastError?.kind ?? 'unknown', file),
        });
      }

      // The backend port says which host tools it needs; preflight checks them the way start-up does.
      const missingTools = backend
        ? (await preflightTools(entry, backend.getRequiredTools(entry))).map((p) => ({
            tool: p.tool,
            problem: p.problem,
            severity: p.severity,
            fix: p.fix,
          }))
        : [];
      for (const t of missingTools) findings.push({ problem: `${t.tool}: ${t.problem}`, fix: t.fix });
      const gaveUp = row.deliveryGivenUp;
      if (gaveUp)
        findings.push({
          problem: `${gaveUp.event} for ${gaveUp.agentId} to ${gaveUp.target} was given up: ${gaveUp.lastError}`,
          fix: `make the provisioning target answer 2xx (or fix the template); \`kici-admin event show ${gaveUp.eventId}\` lists the attempts`,
        });

      // Unconfined label sets were asked for (trust: host): a risk to show, not a fault to fix.
      const risks = (backend?.confinement?.() ?? []).flatMap((c) => (c.risk ? [c.risk] : []));
      return {
        name: entry.name,
        type: entry.type,
        healthy: findings.length === 0,
        risks,
        failures,
        backoff,
        caps: {
          active: row.active,
          maxAgents: row.maxAgents,
          reserved: row.reserved,
          usage: row.usage,
          resourceCap: row.resourceCap,
        },
        warmPool: row.warmPool,
        missingTools,
        findings,
      };
    }),
  );
  // Retiring scalers keep a row while their agents finish: their failures are still news.
  const views = scaler.scalerEntries().map(({ entry, retiringSinceMs }) => ({
    name: entry.name,
    type: entry.type,
    activeCount:
      scaler
        .backendList()
        .find((b) => b.name === entry.name)
        ?.getActiveCount() ?? 0,
    retiring: retiringSinceMs !== undefined,
  }));
  const network = await networkCheck?.();
  const limits = scaler.backendList().flatMap((b) => {
    const l = b.limitsEnforcement?.();
    return l ? [{ name: b.name, ...l }] : [];
  });
  const checks = [
    ...scalerProvisioningRows(views, scaler.failures.records(), now),
    ...limitsRows(limits),
    ...(network ? [{ ...network, details: null }] : []),
  ];
  return { configured: true, healthy: scalers.every((s) => s.healthy), scalers, checks };
}
