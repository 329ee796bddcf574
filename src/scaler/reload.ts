import { detectLabelSetOverlaps, type ScalerConfig, type ScalerEntry } from '../config/index.js';
import { errorMessage, UserError } from '../util/errors.js';
import type { ReloadHost } from './lifecycle-port.js';
import type { ScalerBackend } from './types.js';

export type BackendFactory = (entry: ScalerEntry, config: ScalerConfig) => Promise<ScalerBackend>;

export interface ReloadPlan {
  added: string[];
  updated: string[];
  unchanged: string[];
  retired: string[];
  resurrected: string[];
  global: string[];
}

export type ReloadOutcome =
  { result: 'applied'; plan: ReloadPlan } | { result: 'rejected'; problems: string[] };

/** Key-order-independent JSON, to tell an edited entry from an untouched one. */
function stable(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stable).join(',')}]`;
  if (value && typeof value === 'object') {
    return `{${Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${stable((value as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** Pure: what a reload would do, and why it must be refused. */
export function planReload(
  current: {
    config: ScalerConfig;
    entries: ReadonlyMap<string, ScalerEntry>;
    retiring: ReadonlyMap<string, number>;
  },
  next: ScalerConfig,
): { plan: ReloadPlan; problems: string[] } {
  const plan: ReloadPlan = {
    added: [],
    updated: [],
    unchanged: [],
    retired: [],
    resurrected: [],
    global: [],
  };
  const problems: string[] = [];
  const nextNames = new Set(next.scalers.map((s) => s.name));
  for (const entry of next.scalers) {
    const loaded = current.entries.get(entry.name);
    if (!loaded) plan.added.push(entry.name);
    else if (loaded.type !== entry.type) {
      problems.push(
        `scaler "${entry.name}": backend type cannot change from ${loaded.type} to ${entry.type} on reload; restart the orchestrator to apply`,
      );
    } else if (current.retiring.has(entry.name)) plan.resurrected.push(entry.name);
    else if (stable(loaded) !== stable(entry)) plan.updated.push(entry.name);
    else plan.unchanged.push(entry.name);
  }
  for (const name of current.entries.keys()) {
    if (!nextNames.has(name) && !current.retiring.has(name)) plan.retired.push(name);
  }
  for (const o of detectLabelSetOverlaps(next.scalers)) {
    problems.push(`Label set [${o.labels}] overlaps between scalers "${o.scaler1}" and "${o.scaler2}"`);
  }
  if (current.config.globalMaxAgents !== next.globalMaxAgents) plan.global.push('globalMaxAgents');
  if (stable(current.config.globalResourceCap ?? null) !== stable(next.globalResourceCap ?? null))
    plan.global.push('globalResourceCap');
  return { plan, problems };
}

/**
 * Apply a new config all-or-nothing: every kept backend checks its new entry (changing nothing),
 * the added ones are built (preflight included), and only when all of that passed is anything
 * changed, in one synchronous step. So a refusal has nothing to roll back. Running agents are
 * untouched; new settings apply to new spawns. Removed scalers retire: no new routing, torn down
 * when empty.
 */
export async function applyReload(
  m: ReloadHost,
  next: ScalerConfig,
  factory: BackendFactory,
): Promise<ReloadOutcome> {
  const s = m.state;
  const { plan, problems } = planReload(s, next);
  if (problems.length) return { result: 'rejected', problems };

  const kept: { backend: ScalerBackend; entry: ScalerEntry }[] = [];
  const refused: string[] = [];
  for (const entry of next.scalers) {
    if (plan.added.includes(entry.name)) continue;
    const backend = s.backends.get(entry.name);
    if (!backend) continue;
    const v = backend.checkReload(entry);
    if (v.valid) kept.push({ backend, entry });
    else refused.push(...v.errors.map((e) => `scaler "${entry.name}": ${e}`));
  }
  if (refused.length) return { result: 'rejected', problems: refused };
  const built: ScalerBackend[] = [];
  for (const name of plan.added) {
    try {
      built.push(
        await factory(
          next.scalers.find((e) => e.name === name)!,
          next,
        ),
      );
    } catch (err) {
      await Promise.allSettled(built.map((b) => b.shutdownAll()));
      const said = err instanceof UserError ? err.problems : [errorMessage(err)];
      return {
        result: 'rejected',
        problems: said.map((p) => (p.startsWith(`scaler "${name}"`) ? p : `scaler "${name}": ${p}`)),
      };
    }
  }

  // Commit: nothing below awaits, so no decision sees a half-applied config.
  for (const k of kept) k.backend.applyReload(k.entry);
  // A changed entry may be the fix for what failed (a wrong path, a missing image): retry at once.
  const cleared = plan.updated.flatMap((name) =>
    s.backoff
      .clear(name, undefined, { by: 'reload', atMs: m.opts.clock.now() })
      .map((labelSet) => ({ scaler: name, labelSet })),
  );
  if (cleared.length) m.log.info({ cleared }, 'reload cleared the backoff of changed scalers');
  for (const b of built) s.addBackend(b);
  for (const name of plan.retired) s.retire(name, m.opts.clock.now());
  for (const name of plan.resurrected) s.resurrect(name);
  s.applyConfig(next);
  if (m.opts.ledger) {
    for (const pool of next.machinePools ?? []) {
      try {
        m.opts.ledger.registerPool(pool.name, pool.cap);
      } catch {
        // The new cap is written under the ledger's lock after the reload is applied; a failed
        // write leaves the old cap in force, which peers still enforce, so it is reported, not thrown.
        m.opts.ledger
          .updateCap(pool.name, pool.cap)
          .catch((err: unknown) => m.noteSwallowed('scaler.ledger-cap-update', err, { pool: pool.name }));
      }
    }
  }
  m.warm.configure();
  m.log.info({ plan }, 'scaler configuration reloaded');
  m.sweepRetired();
  m.notifyCapacityFreed();
  return { result: 'applied', plan };
}
