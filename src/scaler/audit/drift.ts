/**
 * The scaler audit's decision: what the store says is alive against what each backend really has.
 * Pure: the async shell (auditor.ts) gathers the inputs, this only compares them.
 */
import type { InventoryItem, InventoryKind } from '../types.js';

/** A spawn record: the store's word that an agent of `scaler` has (or is getting) compute. */
export interface AuditRecord {
  agentId: string;
  scaler: string;
  spawnedAtMs: number;
}

/** One backend's answer: what it has, or why it could not say. */
export type AuditInventory =
  | { scaler: string; items: readonly InventoryItem[] }
  | { scaler: string; error: string }
  /** The backend cannot list what it has: its records are not judged. */
  | { scaler: string; unsupported: true };

export interface AuditInput {
  /** Spawn records this instance owns (its backends are the ones asked). */
  records: readonly AuditRecord[];
  inventories: readonly AuditInventory[];
  /** Agent ids any instance still has a spawn record for (tokens are shared by the cluster). */
  recordedAnywhere: ReadonlySet<string>;
  /** Scaler agents holding an unrevoked, unexpired token. */
  liveTokens: readonly string[];
  /** Agents the manager tracks in memory right now (a spawn whose record is being written). */
  tracked: ReadonlySet<string>;
  nowMs: number;
  /** A record younger than this may not have compute yet: not judged. */
  graceMs: number;
}

/**
 * - `missing-compute`: the store says alive, the backend has nothing for it.
 * - `unrecorded-compute`: the backend has compute (or rules, a TAP) no record accounts for.
 * - `orphan-token`: a live scaler-agent token with neither a record nor compute behind it.
 */
export type DriftKind = 'missing-compute' | 'unrecorded-compute' | 'orphan-token';

export interface Drift {
  kind: DriftKind;
  /** What is out of step: the backend's resource kind, or the store's record or token. */
  resource: InventoryKind | 'record' | 'token';
  scaler: string | null;
  agentId: string | null;
  ref: string;
  /** A leftover that runs nothing (an exited container): safe to remove without asking. */
  stopped?: true;
}

export interface AuditResult {
  drift: Drift[];
  /** Scalers whose backend could not be asked (their records are not judged), with why. */
  unchecked: { scaler: string; reason: string }[];
}

export function diffAudit(input: AuditInput): AuditResult {
  const drift: Drift[] = [];
  const unchecked: AuditResult['unchecked'] = [];
  const answered = new Map<string, readonly InventoryItem[]>();
  for (const inv of input.inventories) {
    if ('items' in inv) answered.set(inv.scaler, inv.items);
    else
      unchecked.push({ scaler: inv.scaler, reason: 'error' in inv ? inv.error : 'cannot list its compute' });
  }
  const recorded = new Map(input.records.map((r) => [r.agentId, r]));
  const withCompute = new Set<string>();
  for (const [scaler, items] of answered) {
    for (const it of items) {
      if (it.stopped) {
        // Runs nothing: drift unless its agent is being torn down right now.
        if (it.agentId === null || !input.tracked.has(it.agentId))
          drift.push({
            kind: 'unrecorded-compute',
            resource: it.kind,
            scaler,
            agentId: it.agentId,
            ref: it.ref,
            stopped: true,
          });
        continue;
      }
      if (it.agentId !== null) withCompute.add(it.agentId);
      // Another instance's record accounts for it too (a provision adopted from a peer).
      const owned =
        it.agentId !== null &&
        (recorded.has(it.agentId) || input.recordedAnywhere.has(it.agentId) || input.tracked.has(it.agentId));
      if (!owned)
        drift.push({
          kind: 'unrecorded-compute',
          resource: it.kind,
          scaler,
          agentId: it.agentId,
          ref: it.ref,
        });
    }
  }
  for (const r of input.records) {
    const items = answered.get(r.scaler);
    if (!items || input.nowMs - r.spawnedAtMs < input.graceMs) continue;
    if (!items.some((it) => it.agentId === r.agentId && !it.stopped))
      drift.push({
        kind: 'missing-compute',
        resource: 'record',
        scaler: r.scaler,
        agentId: r.agentId,
        ref: r.agentId,
      });
  }
  for (const id of new Set(input.liveTokens)) {
    if (input.recordedAnywhere.has(id) || recorded.has(id) || input.tracked.has(id) || withCompute.has(id))
      continue;
    drift.push({ kind: 'orphan-token', resource: 'token', scaler: null, agentId: id, ref: id });
  }
  return { drift: drift.sort(byKey), unchecked };
}

function keyOf(d: Drift): string {
  return `${d.kind}\0${d.resource}\0${d.scaler ?? ''}\0${d.agentId ?? ''}\0${d.ref}`;
}

function byKey(a: Drift, b: Drift): number {
  const ka = keyOf(a);
  const kb = keyOf(b);
  return ka < kb ? -1 : ka > kb ? 1 : 0;
}

/**
 * Drift seen in both of two snapshots taken one after the other. A teardown or a spawn in flight
 * shows for a moment as drift in one snapshot; only what stays out of step is reported.
 */
export function confirmedDrift(first: readonly Drift[], second: readonly Drift[]): Drift[] {
  const seen = new Set(first.map(keyOf));
  return second.filter((d) => seen.has(keyOf(d)));
}

/** Drift counted by kind and resource, for the gauge (every kind present, zeros included). */
export function countDrift(drift: readonly Drift[]): Map<DriftKind, number> {
  const counts = new Map<DriftKind, number>([
    ['missing-compute', 0],
    ['unrecorded-compute', 0],
    ['orphan-token', 0],
  ]);
  for (const d of drift) counts.set(d.kind, (counts.get(d.kind) ?? 0) + 1);
  return counts;
}
