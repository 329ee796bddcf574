/**
 * What a backend reports of the compute it really has, from its own evidence: its inventory (the
 * scaler audit compares it with the store) and the orphans `cleanupOrphans` removes. Part of the
 * backend contract (types.ts re-exports them).
 */

/** Something cleanupOrphans removed, or would remove in a dry run. */
export interface OrphanItem {
  /** The agent the compute belonged to; null for things without one (stale firewall rules). */
  agentId: string | null;
  /** What it is on the backend: a container id, a pid, a rule set's address. */
  ref: string;
  /** Why it counts as an orphan, in words. */
  reason: string;
}

/** What a backend's inventory lists: compute, host network pieces, or a provision sent out. */
export type InventoryKind = 'process' | 'container' | 'vm' | 'tap' | 'rules' | 'provision';

/** One thing a backend really has right now, for the scaler audit. */
export interface InventoryItem {
  kind: InventoryKind;
  /** The agent it belongs to; null for things without one (a TAP or rule set with no lease). */
  agentId: string | null;
  /** What it is on the backend: a pid, a container id, a TAP name, an address. */
  ref: string;
  /**
   * Left over, not running (an exited container): never anyone's live work, so it is drift unless
   * its agent is being torn down right now, and the periodic audit removes it.
   */
  stopped?: true;
}

export interface CleanupOrphansOptions {
  /** Report, remove nothing. */
  dryRun?: boolean;
  /**
   * An operator asked for this sweep (`reap-orphans`), as opposed to the automatic one at start-up.
   * A backend whose evidence cannot tell its own orphans from another orchestrator's (bare-metal
   * processes) sweeps only then.
   */
  requested?: boolean;
  onItem?: (item: OrphanItem) => void;
}
