import { randomUUID } from 'node:crypto';
import { normalizeLabelSet } from '../config/index.js';
import { AdoptionRepo, type AdoptedSpawn, type SpawnRowFacts } from '../store/adoption-repo.js';
import { ClaimsRepo } from '../store/claims-repo.js';
import { errorMessage } from '../util/errors.js';
import type { ManagedEntry } from './agent-book.js';
import { agentLabelsFor } from './core/routing.js';
import type { ScaleDownReason, ScalerEventEmitterLike } from './events/payloads.js';
import type { AgentLifecycle } from './lifecycle-port.js';
import type { ReturnWatch } from './registration-return.js';
import type { DestroyReason } from './types.js';

/** The store could not say whether this instance may adopt the agent: refuse it, reclaim nothing. */
export class ScalerAdoptionLookupError extends Error {}

/** An event agent adopted here whose scaler this instance does not configure: its teardown spec. */
export interface AdoptedSpec {
  scalerName: string;
  targets: string[];
  gate: string[];
}

export interface AdoptionHost extends AgentLifecycle {
  readonly opts: AgentLifecycle['opts'] & { readonly scaleEvents?: ScalerEventEmitterLike | undefined };
  noteSwallowed(site: string, err: unknown, context?: Record<string, unknown>): void;
  /** Counted as `kici_orch_scaler_adoption_lookup_failures_total`. */
  onAdoptionLookupFailed(): void;
  /** Agents whose registration failed here: an adopted agent's end is the end of its record there. */
  readonly returns: Pick<ReturnWatch, 'drop'>;
}

export type AdoptionOutcome =
  { kind: 'adopted'; row: AdoptedSpawn; configured: boolean } | { kind: 'refused'; reason: string };

/**
 * Cross-instance adoption: an event agent may register with any orchestrator on the shared store.
 * The spawn row decides who answers for it; the adopter gates it with the row's mandatory labels
 * and, when it leaves, sends the scale-down to the targets recorded at spawn, even without a scaler
 * of that name here. The spawner is never told: its stale prune reads the adopter.
 */
export class Adoptions {
  /** Adopted agents of scalers not configured here (configured ones live in the manager's index). */
  private readonly specs = new Map<string, AdoptedSpec>();
  private readonly repo: AdoptionRepo;

  constructor(private readonly host: AdoptionHost) {
    this.repo = new AdoptionRepo(host.opts.store.db);
  }

  has(agentId: string): boolean {
    return this.specs.has(agentId);
  }

  spec(agentId: string): AdoptedSpec | undefined {
    return this.specs.get(agentId);
  }

  /**
   * Take the row for this instance (one conditional update). A configured event scaler gets the
   * agent in the manager's index in phase `reconnecting`, so the normal registration completes it.
   */
  async adopt(agentId: string): Promise<AdoptionOutcome> {
    const { instanceId, clock } = this.host.opts;
    let row: AdoptedSpawn | null;
    try {
      row = await this.repo.adoptSpawningAgent(agentId, instanceId, new Date(clock.now()));
    } catch (err) {
      this.host.onAdoptionLookupFailed();
      throw new ScalerAdoptionLookupError(`spawn record lookup failed: ${errorMessage(err)}`, { cause: err });
    }
    if (!row) {
      const facts = await this.repo.describe(agentId).catch((err: unknown) => {
        this.host.noteSwallowed('scaler.adoption-describe', err, { agentId });
        return undefined;
      });
      return { kind: 'refused', reason: refusalReason(facts, instanceId) };
    }
    const s = this.host.state;
    const known = s.agents.get(agentId);
    if (known && s.backends.get(known.scalerName)?.capabilities.peerAdoptable)
      return { kind: 'adopted', row, configured: true };
    const entry = s.entries.get(row.scalerName);
    const backend = s.backends.get(row.scalerName);
    if (entry && backend?.capabilities.peerAdoptable && backend.adopt && !s.retiring.has(row.scalerName)) {
      await backend.adopt(agentId, row.labelSet, agentId, row.provisioningTargets);
      const m: ManagedEntry = {
        agentId,
        scalerName: row.scalerName,
        type: backend.type,
        labelSet: row.labelSet,
        labelSetKey: normalizeLabelSet(row.labelSet),
        fullLabels: agentLabelsFor(entry, row.labelSet),
        // The gate comes from the row, never from this instance's config or the agent's claims.
        gate: row.mandatoryLabels,
        boundJobId: row.boundJobId ?? undefined,
        runId: row.runId ?? undefined,
        createdAtMs: clock.now(),
        phase: 'reconnecting',
        origin: { warm: row.boundJobId === null, recovered: { registeredBefore: row.registeredBefore } },
        requests: { cpus: 0, memBytes: 0 },
        limits: { cpus: 0, memBytes: 0 },
        backendRef: agentId,
        abort: new AbortController(),
      };
      s.track(m);
      s.caps.add({ agentId, scalerName: m.scalerName, requests: m.requests, limits: m.limits });
      return { kind: 'adopted', row, configured: true };
    }
    this.specs.set(agentId, {
      scalerName: row.scalerName,
      targets: row.provisioningTargets,
      gate: row.mandatoryLabels,
    });
    return { kind: 'adopted', row, configured: false };
  }

  /**
   * The adopted agent of an unconfigured scaler left: emit its scale-down to the recorded targets,
   * then drop its row. A failed emit keeps the row, so the leader's reaper can still act on it.
   */
  async teardown(agentId: string, reason: DestroyReason): Promise<void> {
    const spec = this.specs.get(agentId);
    if (!spec) return;
    this.specs.delete(agentId);
    // A configured agent's record goes with its entry (the manager's `forget`); this is the one end
    // of an unconfigured one, and a record kept past it would stay for the life of the process.
    this.host.returns.drop(agentId);
    const { store, clock } = this.host.opts;
    const log = this.host.log;
    const emitter = this.host.opts.scaleEvents;
    let emitted = false;
    if (!emitter || !spec.targets.length) {
      log.error(
        { agentId, scaler: spec.scalerName },
        'adopted event agent left but its scale-down has nowhere to go (no recorded targets); keeping its record',
      );
    } else {
      try {
        const down = toScaleDown(reason);
        await emitter.emitScalerScaleDown(
          { scalerName: spec.scalerName, agentId, reason: down, requestId: randomUUID() },
          spec.targets,
        );
        log.info(
          { agentId, scaler: spec.scalerName, reason: down },
          'scale-down emitted for an adopted agent',
        );
        emitted = true;
      } catch (err) {
        log.warn({ agentId, err: errorMessage(err) }, 'scale-down of an adopted agent failed; record kept');
      }
    }
    // The token goes before the record does (teardown.ts says why).
    await store.tokens
      .revokeForAgent(agentId, new Date(clock.now()))
      .catch((e: unknown) => this.host.noteSwallowed('scaler.token-revoke', e, { agentId }));
    if (emitted)
      await store.spawns
        .deleteAgent(agentId)
        .catch((err: unknown) =>
          log.warn({ agentId, err: errorMessage(err) }, 'could not delete the record of an adopted agent'),
        );
    await new ClaimsRepo(store.db)
      .invalidate(agentId)
      .catch((e: unknown) => this.host.noteSwallowed('scaler.claim-invalidate', e, { agentId }));
  }

  /** Who adopted each of these provisions (a live row's adopter, else the outcome's, else null). */
  adopters(agentIds: readonly string[]): Promise<Map<string, string | null>> {
    return this.repo.provisionAdopters(agentIds);
  }

  purgeOutcomes(cutoff: Date): Promise<number> {
    return this.repo.purgeOutcomes(cutoff);
  }
}

function refusalReason(facts: SpawnRowFacts | undefined, me: string): string {
  if (!facts) return 'no spawn record for this scaler agent id';
  if (!facts.peerAdoptable)
    return (
      `agent was spawned by orchestrator "${facts.ownerInstanceId ?? 'unknown'}" on its own host ` +
      `(${facts.backendType} backend); only event agents may register with another orchestrator`
    );
  return `agent is already adopted by orchestrator "${facts.adoptedBy ?? 'unknown'}", not "${me}"`;
}

/** What the customer's teardown is told when an adopted agent leaves. */
function toScaleDown(reason: DestroyReason): ScaleDownReason {
  switch (reason) {
    case 'heartbeat-timeout':
    case 'idle':
    case 'drain':
    case 'shutdown':
    case 'spawn-timeout':
    case 'job-complete':
      return reason;
    case 'spawn-failed':
      return 'spawn-timeout';
    case 'orphan':
      return 'heartbeat-timeout';
    case 'disconnected':
      return 'job-complete';
  }
}
