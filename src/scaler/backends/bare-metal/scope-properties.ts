import type { EffectiveLimits } from '../../types.js';
import { AGENT_PIDS_LIMIT } from './cgroups.js';

/**
 * The command prefix that starts one agent in a transient scope of the user's service manager,
 * with its limits as unit properties. `systemd-run --scope` execs the command itself (no fork), so
 * the process we spawn stays the agent and the scope's main process; `--collect` unloads the scope
 * when it ends even if it failed, so nothing is left to clean up after a normal exit.
 */
export function scopeCommand(
  systemdRun: string,
  agentId: string,
  limits: EffectiveLimits | undefined,
): string[] {
  return [
    systemdRun,
    '--user',
    '--scope',
    '--quiet',
    '--collect',
    `--unit=${scopeUnitName(agentId)}`,
    '--slice=kici-scaler',
    ...scopeProperties(limits).flatMap((p) => ['-p', p]),
    '--',
  ];
}

/** The scope unit of one agent, named so teardown can reach it without a record of it. */
export function scopeUnitName(agentId: string): string {
  // Unit names allow letters, digits and `:_.-\`; agent ids are already within that set, but an id
  // from an older store must still make a name systemd accepts.
  return `kici-agent-${agentId.replace(/[^A-Za-z0-9:_.-]/g, '_')}.scope`;
}

/**
 * Our limits as systemd resource-control properties, the same bounds the cgroupfs writer sets:
 * memory in bytes with no swap beyond it, CPU as a percentage of one CPU (at least 1%, the
 * smallest quota systemd takes), and the same task cap. A zero limit means "not limited" and
 * yields no property.
 */
export function scopeProperties(limits: EffectiveLimits | undefined): string[] {
  const out: string[] = [];
  if (limits?.memBytes && limits.memBytes > 0) {
    out.push(`MemoryMax=${Math.floor(limits.memBytes)}`, 'MemorySwapMax=0');
  }
  if (limits?.cpus && limits.cpus > 0) out.push(`CPUQuota=${cpuQuotaPercent(limits.cpus)}%`);
  out.push(`TasksMax=${AGENT_PIDS_LIMIT}`);
  return out;
}

/** CPUs as whole percent of one CPU, rounded to the nearest, never below 1. */
export function cpuQuotaPercent(cpus: number): number {
  return Math.max(1, Math.round(cpus * 100));
}
