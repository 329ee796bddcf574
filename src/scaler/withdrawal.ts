import { TERMINAL_JOB_STATES } from '../store/schema.js';
import { errorMessage } from '../util/errors.js';
import type { ManagedEntry } from './agent-book.js';
import type { Store } from '../store/index.js';
import type { Logger } from '../util/logger.js';
import type { TeardownReason } from './lifecycle-port.js';
import type { ScalerState } from './state.js';

/** What withdrawal needs of the manager. */
export interface WithdrawalHost {
  readonly opts: { readonly store: Store };
  readonly log: Logger;
  readonly instanceId: string;
  readonly state: ScalerState;
  readonly adoption: { adopters(agentIds: readonly string[]): Promise<Map<string, string | null>> };
  entries(): ManagedEntry[];
  teardown(m: ManagedEntry, reason: TeardownReason): Promise<void>;
  forget(m: ManagedEntry): void;
  notifyCapacityFreed(): void;
}

/**
 * Provisions that lost their reason to exist: spawned for a job, not registered yet, and the job has
 * since ended (cancelled, or run by another agent). Waiting for the spawn deadline would keep paid
 * compute up for minutes; instead each is torn down as `job-complete` (not a failure: no backoff,
 * no report on the job). A store that cannot say how the jobs stand withdraws nothing this time.
 * Returns the withdrawn agent ids.
 */
export async function withdrawEndedProvisions(mgr: WithdrawalHost): Promise<string[]> {
  const candidates = mgr.entries().filter((m) => m.phase === 'starting' && m.boundJobId !== undefined);
  if (!candidates.length) return [];
  let ended: Set<string>;
  let adopters: Map<string, string | null>;
  try {
    const rows = await mgr.opts.store.db
      .selectFrom('jobs')
      .select(['id', 'state'])
      .where(
        'id',
        'in',
        candidates.map((m) => m.boundJobId!),
      )
      .execute();
    ended = new Set(rows.filter((r) => TERMINAL_JOB_STATES.includes(r.state)).map((r) => r.id));
    // A provision that registered with a peer is that peer's to end (it may have run the job there).
    const shared = candidates.filter((m) => isClusterOwned(mgr, m) && ended.has(m.boundJobId!));
    adopters = shared.length ? await mgr.adoption.adopters(shared.map((m) => m.agentId)) : new Map();
  } catch (err) {
    mgr.log.warn({ err: errorMessage(err) }, 'could not read job states; no provision withdrawn this pass');
    return [];
  }
  const withdrawn: string[] = [];
  for (const m of candidates) {
    // Still the same entry and still unregistered after the read: it may have registered meanwhile.
    if (!ended.has(m.boundJobId!) || !stillWaiting(mgr, m)) continue;
    const adopter = adopters.get(m.agentId);
    if (adopter && adopter !== mgr.instanceId) {
      // The same words as the reaper's, which would have found it later: one line for one outcome.
      mgr.log.info(
        { agentId: m.agentId, scaler: m.scalerName, jobId: m.boundJobId, adoptedBy: adopter },
        'provision adopted by a peer; forgotten here',
      );
      mgr.state.backends.get(m.scalerName)?.forget?.(m.agentId);
      mgr.forget(m);
      mgr.notifyCapacityFreed();
      continue;
    }
    withdrawn.push(m.agentId);
    await withdraw(mgr, m, 'withdrawing a provision whose job ended before its agent registered');
  }
  return withdrawn;
}

function isClusterOwned(mgr: WithdrawalHost, m: ManagedEntry): boolean {
  return mgr.state.backends.get(m.scalerName)?.capabilities.lifetime === 'cluster';
}

function stillWaiting(mgr: WithdrawalHost, m: ManagedEntry): boolean {
  return mgr.state.agents.get(m.agentId) === m && m.phase === 'starting';
}

/**
 * Provisions for jobs that were never stored (their run's insert failed after the spawn was asked
 * for it, dispatch/early-provision.ts): torn down at once, as a job ended before its agent came.
 */
export async function withdrawProvisionsFor(mgr: WithdrawalHost, jobIds: readonly string[]): Promise<void> {
  const ids = new Set(jobIds);
  const gone = mgr.entries().filter((m) => m.boundJobId !== undefined && ids.has(m.boundJobId));
  for (const m of gone) {
    // Still being started, or started and not registered (an agent that came has nothing to take).
    if (mgr.state.agents.get(m.agentId) !== m || (m.phase !== 'spawning' && m.phase !== 'starting')) continue;
    await withdraw(mgr, m, 'withdrawing a provision whose run was not stored');
  }
}

/** A provision its job no longer needs: its start called off, its agent torn down (no failure). */
async function withdraw(mgr: WithdrawalHost, m: ManagedEntry, why: string): Promise<void> {
  mgr.log.info({ agentId: m.agentId, scaler: m.scalerName, jobId: m.boundJobId }, why);
  m.abort.abort(new Error(why));
  await mgr.teardown(m, 'job-complete');
}
