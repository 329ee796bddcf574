import { normalizeLabelSet } from '../config/index.js';
import type { ManagedEntry } from './agent-book.js';
import { agentLabelsFor } from './core/routing.js';
import { errorMessage } from '../util/errors.js';
import type { RecoveryHost } from './lifecycle-port.js';

export interface RecoveryCounts {
  adopted: number;
  reclaimed: number;
  dropped: number;
  /** Agents whose backend could not say whether their compute survived (present only when some). */
  uncertain?: number;
  /** Tokens revoked because no spawn record backed them (present only when some). */
  revokedTokens?: number;
}

/** How often a backend that could not tell is asked again. */
export const ADOPT_RECHECK_MS = 15_000;

/**
 * After a restart (clean or kill -9): re-adopt this instance's agents whose compute is provably
 * still there (they may reconnect), reclaim the rest, and rebuild cap usage from stored
 * reservations. Agents that do not reconnect within the window are torn down.
 */
export async function recoverAgents(m: RecoveryHost, reconnectWindowMs: number): Promise<RecoveryCounts> {
  const { store, instanceId, clock, ledger } = m.opts;
  const s = m.state;
  const counts: RecoveryCounts = { adopted: 0, reclaimed: 0, dropped: 0 };
  const uncertain = new Map<string, ManagedEntry>();
  const rows = await store.spawns.listOwned(instanceId);
  const reservations = new Map((await store.spawns.listReservations(instanceId)).map((r) => [r.agent_id, r]));
  const unstored = await jobsNeverStored(m, rows);
  for (const row of rows) {
    const backend = s.backends.get(row.scaler_name);
    const entry = s.entries.get(row.scaler_name);
    // `false` is evidence the compute is gone (or of no use: its job was never stored); a rejection
    // (engine unreachable, say) is no evidence.
    let adopted: boolean | 'unknown';
    try {
      adopted = unstored.has(row.agent_id)
        ? false
        : backend && entry
          ? ((await backend.adopt?.(row.agent_id, row.label_set, row.backend_ref)) ?? false)
          : false;
    } catch (err) {
      adopted = 'unknown';
      m.log.warn(
        { agentId: row.agent_id, scaler: row.scaler_name, err: errorMessage(err) },
        "cannot tell whether the agent's compute survived the restart; keeping its record and asking again",
      );
    }
    if (!adopted || !entry) {
      const reclaimed =
        (await backend?.reapUnowned?.(row.agent_id, row.backend_ref).catch((err: unknown) => {
          m.noteSwallowed('scaler.reap-unowned', err, { agentId: row.agent_id, scaler: row.scaler_name });
          return false;
        })) ?? false;
      if (reclaimed) counts.reclaimed++;
      else counts.dropped++;
      // Token first, as in a teardown (teardown.ts).
      await store.tokens
        .revokeForAgent(row.agent_id, new Date(clock.now()))
        .catch((err: unknown) => m.noteSwallowed('scaler.token-revoke', err, { agentId: row.agent_id }));
      await store.spawns.deleteAgent(row.agent_id);
      continue;
    }
    const r = reservations.get(row.agent_id);
    const amount = { cpus: r?.cpu_units ?? 0, memBytes: Number(r?.mem_bytes ?? 0) };
    const e: ManagedEntry = {
      agentId: row.agent_id,
      scalerName: row.scaler_name,
      type: entry.type,
      labelSet: row.label_set,
      labelSetKey: normalizeLabelSet(row.label_set),
      fullLabels: agentLabelsFor(entry, row.label_set),
      gate: row.mandatory_labels,
      boundJobId: row.bound_job_id ?? undefined,
      runId: row.run_id ?? undefined,
      createdAtMs: row.spawned_at.getTime(),
      spawnStartedAtMs: row.spawned_at.getTime(),
      phase: 'reconnecting',
      origin: {
        warm: row.bound_job_id === null,
        recovered: { registeredBefore: row.registered_at !== null },
      },
      requests: amount,
      limits: amount,
      machinePool: entry.machinePool,
      backendRef: row.backend_ref ?? '',
      abort: new AbortController(),
    };
    s.track(e);
    // A row that registered before the restart is past provisioning: its job is not waiting on it.
    if (e.boundJobId && !row.registered_at) s.bindJob(e.boundJobId, e.agentId);
    s.caps.add({ agentId: e.agentId, scalerName: e.scalerName, requests: amount, limits: amount });
    if (e.machinePool && ledger) {
      // The agent runs whatever the ledger says; a refusal means the pool is now overcommitted.
      const pool = e.machinePool;
      const held = await ledger
        .tryReserve(pool, e.agentId, amount.cpus, amount.memBytes)
        .catch((err: unknown) => ({ ok: false as const, reason: errorMessage(err) }));
      if (!held.ok)
        m.noteSwallowed('scaler.ledger-rereserve', new Error(held.reason), {
          agentId: e.agentId,
          pool,
          ...amount,
        });
    }
    if (adopted === 'unknown') uncertain.set(e.agentId, e);
    else counts.adopted++;
  }
  // A teardown cut short between its two writes (by an older build, or a store that failed the
  // revocation) left a token with no record behind it: nothing would ever reap its agent.
  const unbacked = await store.tokens.revokeUnbacked(new Date(clock.now()));
  if (unbacked.length) {
    counts.revokedTokens = unbacked.length;
    m.log.warn({ agentIds: unbacked.slice(0, 20) }, 'revoked scaler-agent tokens that no spawn record backs');
  }
  if (counts.adopted > 0) armReconnectWindow(m, reconnectWindowMs, (e) => !uncertain.has(e.agentId));
  if (uncertain.size) {
    counts.uncertain = uncertain.size;
    recheckUncertain(m, uncertain, reconnectWindowMs);
  }
  return counts;
}

/**
 * Spawns that never registered, bound to a job the store does not hold: asked for before their run
 * was stored (dispatch/early-provision.ts), and the orchestrator died before the run was. No job
 * will ever come for their agents, so they are reclaimed rather than adopted (an adopted one would
 * register and wait out its bound job's timeout).
 */
async function jobsNeverStored(
  m: RecoveryHost,
  rows: readonly { agent_id: string; bound_job_id: string | null; registered_at: Date | null }[],
): Promise<Set<string>> {
  const waiting = rows.filter((r) => r.bound_job_id !== null && r.registered_at === null);
  if (!waiting.length) return new Set();
  const held = await m.opts.store.jobs.existing(waiting.map((r) => r.bound_job_id!));
  const unstored = waiting.filter((r) => !held.has(r.bound_job_id!));
  for (const r of unstored)
    m.log.info(
      { agentId: r.agent_id, jobId: r.bound_job_id },
      'reclaiming an agent started for a job that was never stored',
    );
  return new Set(unstored.map((r) => r.agent_id));
}

/** Recovered agents (those `which` picks) still not back after the window are reclaimed. */
function armReconnectWindow(m: RecoveryHost, windowMs: number, which: (e: ManagedEntry) => boolean): void {
  m.opts.clock.setTimer(windowMs, () => {
    for (const e of [...m.state.agents.values()]) {
      if (e.phase === 'reconnecting' && which(e)) {
        m.log.warn({ agentId: e.agentId }, 'recovered agent did not reconnect; reclaiming it');
        void m.teardown(e, 'spawn-timeout');
      }
    }
  });
}

/**
 * Agents kept while their backend could not tell: their record, token and capacity stay (the agent
 * may be running and may register meanwhile). The backend is asked again until it answers: alive →
 * adopted, with its own reconnect window; gone → reclaimed like any other gone agent.
 */
function recheckUncertain(m: RecoveryHost, uncertain: Map<string, ManagedEntry>, windowMs: number): void {
  m.opts.clock.setTimer(ADOPT_RECHECK_MS, () => {
    void (async () => {
      for (const id of [...uncertain.keys()]) {
        const e = uncertain.get(id)!;
        const backend = m.state.backends.get(e.scalerName);
        if (!backend?.adopt) {
          uncertain.delete(id);
          continue;
        }
        let alive: boolean;
        try {
          // Torn down meanwhile (it registered and left): its backend never tracked it, so reclaim.
          if (m.state.agents.get(id) !== e) {
            await backend.reapUnowned?.(id, e.backendRef || null);
            uncertain.delete(id);
            continue;
          }
          alive = await backend.adopt(id, e.labelSet, e.backendRef || null);
        } catch (err) {
          m.log.warn({ agentId: id, err: errorMessage(err) }, 'still cannot tell whether the agent is alive');
          continue;
        }
        uncertain.delete(id);
        if (alive) {
          m.log.info({ agentId: id }, 'agent compute confirmed after a restart');
          armReconnectWindow(m, windowMs, (x) => x.agentId === id);
        } else if (e.phase === 'reconnecting') {
          m.log.warn({ agentId: id }, 'agent compute is gone; reclaiming its record');
          await m.teardown(e, 'spawn-timeout');
        }
      }
      if (uncertain.size) recheckUncertain(m, uncertain, windowMs);
    })();
  });
}
