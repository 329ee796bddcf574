import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import type { LedgerReservation } from './ledger-file.js';

/**
 * Facts used to decide whether a ledger row's owner is still running.
 */

const BOOT_ID_PATH = '/proc/sys/kernel/random/boot_id';

/**
 * The kernel's boot id (Linux). Elsewhere a per-host synthetic id: it cannot tell boots apart,
 * so after a reboot stale rows are found by the pid probe instead of by boot id.
 */
export function readBootId(path = BOOT_ID_PATH): string {
  try {
    const id = readFileSync(path, 'utf8').trim();
    if (id) return id;
  } catch {
    // Not Linux, or /proc is not mounted: fall through to the synthetic id.
  }
  return `synthetic-${hostname()}`;
}

/**
 * `kill(pid, 0)` probe: ESRCH means gone; EPERM means it exists but belongs to another user.
 * Anything unexpected counts as alive, because wrongly dropping a live row lets the pool overshoot.
 */
export function isProcessAlive(pid: number): boolean {
  // pid 0 and negative pids address process groups; such a row is malformed, not alive.
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as { code?: string }).code !== 'ESRCH';
  }
}

export interface RowOwnerContext {
  bootId: string;
  instanceId: string;
  isAlive: (pid: number) => boolean;
  /** Probe pids of other instances on this boot too (see `MachineLedgerOptions`). */
  probeOtherInstances: boolean;
}

/**
 * The dead-row rule: a row from another boot is dead; on this boot our own rows are probed by
 * pid, and other instances' rows only when `probeOtherInstances` is on.
 */
export function isRowDead(row: LedgerReservation, ctx: RowOwnerContext): boolean {
  if (row.bootId !== ctx.bootId) return true;
  if (row.instanceId === ctx.instanceId || ctx.probeOtherInstances) return !ctx.isAlive(row.pid);
  return false;
}
