/**
 * The scaler audit's shell: read the store and ask every backend what it has, compare (drift.ts),
 * and on request reconcile. Also run on a timer so the drift gauge stays current.
 */
import type { Store } from '../../store/index.js';
import type { Clock } from '../../util/clock.js';
import { errorMessage } from '../../util/errors.js';
import type { Logger } from '../../util/logger.js';
import type { ScalerManager } from '../manager.js';
import {
  confirmedDrift,
  countDrift,
  diffAudit,
  type AuditInventory,
  type AuditResult,
  type Drift,
  type DriftKind,
} from './drift.js';

/** A record younger than this is a spawn still starting: its compute may not exist yet. */
export const AUDIT_RECORD_GRACE_MS = 30_000;
/** The periodic audit's interval (it only reads; it never fixes on its own). */
export const AUDIT_INTERVAL_MS = 5 * 60_000;

export interface AuditReport extends AuditResult {
  /** With fix: what was done about each drift item, and the drift left afterwards. */
  fixed?: { drift: Drift; ok: boolean; error?: string }[];
  remaining?: Drift[];
}

export class ScalerAuditor {
  private last: Map<DriftKind, number> | undefined;
  private timer: ReturnType<typeof setInterval> | undefined;
  private running: Promise<AuditReport> | undefined;

  constructor(
    private readonly scaler: ScalerManager,
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly graceMs = AUDIT_RECORD_GRACE_MS,
  ) {}

  /** Drift counts by kind from the last audit; undefined before the first one. */
  lastCounts(): ReadonlyMap<DriftKind, number> | undefined {
    return this.last;
  }

  /** Audit now (a run already under way is shared when no fix is asked). */
  audit(fix = false): Promise<AuditReport> {
    if (fix) return this.auditAndFix();
    this.running ??= this.confirmed().finally(() => (this.running = undefined));
    return this.running;
  }

  start(intervalMs = AUDIT_INTERVAL_MS): void {
    this.timer = setInterval(() => {
      this.audit().then(
        async (r) => {
          await this.removeStopped(r.drift);
          if (r.drift.length)
            this.log.warn({ drift: r.drift.length, items: r.drift.slice(0, 20) }, 'scaler audit found drift');
        },
        (err: unknown) => this.log.warn({ err: errorMessage(err) }, 'scaler audit failed'),
      );
    }, intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /**
   * Leftovers that run nothing (a container whose removal failed while its engine was away) are
   * removed on every periodic audit: no one's live work can be lost by it. Everything else waits
   * for an operator's `--fix`.
   */
  async removeStopped(drift: readonly Drift[]): Promise<number> {
    let removed = 0;
    for (const d of drift) {
      if (!d.stopped || d.agentId === null || !d.scaler) continue;
      const b = this.scaler.state.backends.get(d.scaler);
      const ok = await b?.reapUnowned?.(d.agentId, d.ref).catch((err: unknown) => {
        this.log.warn(
          { agentId: d.agentId, ref: d.ref, err: errorMessage(err) },
          'could not remove a stopped leftover',
        );
        return false;
      });
      if (ok) removed++;
    }
    if (removed) this.log.info({ removed }, 'scaler audit removed stopped leftovers');
    return removed;
  }

  /** Two snapshots one after the other; only drift present in both counts. */
  private async confirmed(): Promise<AuditReport> {
    const first = await this.snapshot();
    if (!first.drift.length) return this.remember(first);
    const second = await this.snapshot();
    return this.remember({ drift: confirmedDrift(first.drift, second.drift), unchecked: second.unchecked });
  }

  private remember(r: AuditReport): AuditReport {
    this.last = countDrift(r.drift);
    return r;
  }

  private async auditAndFix(): Promise<AuditReport> {
    const found = await this.confirmed();
    const fixed: NonNullable<AuditReport['fixed']> = [];
    const sweepScalers = new Set<string>();
    for (const d of found.drift) {
      try {
        if (d.kind === 'unrecorded-compute' && d.agentId === null) {
          if (d.scaler) sweepScalers.add(d.scaler);
          continue;
        }
        await this.fixOne(d);
        fixed.push({ drift: d, ok: true });
      } catch (err) {
        fixed.push({ drift: d, ok: false, error: errorMessage(err) });
      }
    }
    // Host pieces with no agent (a TAP, a rule set) go through the backend's own orphan sweep.
    const alive = (id: string) => this.scaler.isManaged(id);
    for (const name of sweepScalers) {
      const b = this.scaler.state.backends.get(name);
      const items = found.drift.filter((d) => d.scaler === name && d.agentId === null);
      try {
        if (!b?.cleanupOrphans) throw new Error(`scaler ${name} cannot remove leftovers`);
        await b.cleanupOrphans(alive, { requested: true });
        for (const d of items) fixed.push({ drift: d, ok: true });
      } catch (err) {
        for (const d of items) fixed.push({ drift: d, ok: false, error: errorMessage(err) });
      }
    }
    if (fixed.length)
      this.log.info({ fixed: fixed.filter((f) => f.ok).length }, 'scaler audit reconciled drift');
    const after = await this.confirmed();
    return { ...found, fixed, remaining: after.drift };
  }

  private async fixOne(d: Drift): Promise<void> {
    const id = d.agentId!;
    const now = new Date(this.clock.now());
    if (d.kind === 'unrecorded-compute') {
      const b = d.scaler ? this.scaler.state.backends.get(d.scaler) : undefined;
      if (!b?.reapUnowned)
        throw new Error(`scaler ${d.scaler ?? '?'} cannot reclaim compute it does not track`);
      await b.reapUnowned(id, d.ref);
      return;
    }
    const m = d.kind === 'missing-compute' ? this.scaler.state.agents.get(id) : undefined;
    // Tracked: the manager's own teardown releases its capacity and every record.
    if (m) return this.scaler.teardown(m, 'orphan');
    // The token before the record, as in a teardown (teardown.ts).
    await this.store.tokens.revokeForAgent(id, now);
    if (d.kind === 'missing-compute') await this.store.spawns.deleteAgent(id);
  }

  private async snapshot(): Promise<AuditResult> {
    const nowMs = this.clock.now();
    const db = this.store.db;
    const [owned, anywhere, tokens] = await Promise.all([
      this.store.spawns.listOwned(this.scaler.instanceId),
      db.selectFrom('scaler_spawning_agents').select('agent_id').execute(),
      db
        .selectFrom('agent_tokens')
        .select('agent_id')
        .where('kind', '=', 'ephemeral')
        .where('revoked_at', 'is', null)
        .where('agent_id', 'like', 'scaler-%')
        .where((eb) => eb.or([eb('expires_at', 'is', null), eb('expires_at', '>', new Date(nowMs))]))
        .execute(),
    ]);
    const inventories: AuditInventory[] = await Promise.all(
      this.scaler.backendList().map(async (b): Promise<AuditInventory> => {
        if (!b.inventory) return { scaler: b.name, unsupported: true };
        try {
          return { scaler: b.name, items: await b.inventory() };
        } catch (err) {
          return { scaler: b.name, error: errorMessage(err) };
        }
      }),
    );
    return diffAudit({
      records: owned.map((r) => ({
        agentId: r.agent_id,
        scaler: r.scaler_name,
        spawnedAtMs: r.spawned_at.getTime(),
      })),
      inventories,
      recordedAnywhere: new Set(anywhere.map((r) => r.agent_id)),
      liveTokens: tokens.map((t) => t.agent_id),
      tracked: new Set(this.scaler.state.agents.keys()),
      nowMs,
      graceMs: this.graceMs,
    });
  }
}
