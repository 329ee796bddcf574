import type { ScalerEntry } from '../../../config/index.js';
import type { Logger } from '../../../util/logger.js';
import type { ClaimedCredentials, ClaimSpec } from '../../claim-store.js';
import type { ScaleDownReason, ScalerEventEmitterLike, ScalerScaleUpPayload } from '../../events/payloads.js';
import type { DestroyContext, DestroyReason, SpawnContext } from '../../types.js';

/** The part of a claim store the backend uses: issue, redeem, invalidate, and the reload knob. */
export interface EventClaimStore {
  register(spec: ClaimSpec): Promise<string>;
  claim(code: string): Promise<ClaimedCredentials | { error: string }>;
  invalidate(agentId: string): Promise<unknown>;
  setDefaultTtlSeconds(s: number): void;
}

export interface EventScalerBackendOptions {
  /** The scaler entry, `type: 'event'`. */
  entry: ScalerEntry;
  /** Sends the reserved scale-up / scale-down events (tests inject a counting one). */
  emitter: ScalerEventEmitterLike;
  /** Issues the claim code of each provision; redeemed by the instance's agent or its workflow. */
  claimStore: EventClaimStore;
  /** Correlation id of each scale-up / scale-down request. */
  requestId: () => string;
  /** Why these targets cannot work here (a webhook without a signing secret); checked on reload. */
  checkTargets?: (targets: readonly string[]) => string | undefined;
  /** Absent: nothing is logged. */
  logger?: Logger | undefined;
  now?: () => number;
}

/** Why a provision's spawn was told to stop (the destroy's reason, or none named: a shutdown). */
export type CancelReason = DestroyReason | ScaleDownReason;

/**
 * destroy() may also be given a reason of the customer's own vocabulary; the targets recorded at
 * spawn (a peer tearing down someone else's provision) come with the port's DestroyContext.
 */
export interface EventDestroyContext extends Omit<DestroyContext, 'reason'> {
  reason?: CancelReason;
}

/**
 * One provision the backend tracks. While its spawn runs, the spawn alone may tear it down (it
 * knows whether the scale-up went out), so a destroy only asks it to through `cancel`; the spawn
 * reads the answer through `cancelledWith`.
 */
export class Provision {
  #state: 'provisioning' | 'active';
  #spawning: boolean;
  #cancelled: CancelReason | undefined;

  constructor(
    readonly labelSet: string[],
    readonly createdAt: number,
    /** Where its scale-up went; its scale-down goes to the same place. */
    readonly targets: string[] | undefined,
    /** Still spawning here, or taken over (adopted) with its scale-up long out. */
    from: 'spawn' | 'adopted',
  ) {
    this.#spawning = from === 'spawn';
    this.#state = from === 'spawn' ? 'provisioning' : 'active';
  }

  get state(): 'provisioning' | 'active' {
    return this.#state;
  }

  /** Why a destroy came while the spawn was running, if one did. */
  get cancelledWith(): CancelReason | undefined {
    return this.#cancelled;
  }

  /** The instance's agent registered. */
  markActive(): void {
    this.#state = 'active';
  }

  /** The spawn's scale-up is out: from now on a destroy sends the scale-down itself. */
  scaleUpSent(): void {
    this.#spawning = false;
  }

  /**
   * A destroy came. `true`: the spawn is still running and has taken note (it tears the provision
   * down itself); `false`: the caller must send the scale-down.
   */
  cancel(reason: CancelReason): boolean {
    if (!this.#spawning) return false;
    this.#cancelled = reason;
    return true;
  }
}

/** What the customer's teardown is told, from why the manager tears the agent down. */
export function scaleDownReason(reason: EventDestroyContext['reason']): ScaleDownReason {
  switch (reason) {
    case undefined:
    case 'shutdown':
      return 'shutdown';
    // A single-use agent leaving is its job being over; a failed spawn here is one that never came.
    case 'disconnected':
      return 'job-complete';
    case 'spawn-failed':
      return 'spawn-timeout';
    case 'orphan':
      return 'heartbeat-timeout';
    default:
      return reason;
  }
}

/** The scale-up payload: mandatory labels from the spawn, else the entry; size from the limits. */
export function scaleUpPayload(
  scalerName: string,
  entry: ScalerEntry,
  ctx: SpawnContext,
  claimCode: string,
  requestId: string,
): ScalerScaleUpPayload {
  const resources: ScalerScaleUpPayload['resources'] = {};
  if (ctx.limits?.cpus) resources.cpus = ctx.limits.cpus;
  if (ctx.limits?.memBytes) resources.memBytes = ctx.limits.memBytes;
  return {
    scalerName,
    agentId: ctx.agentId,
    labels: ctx.fullLabels,
    mandatoryLabels: ctx.mandatoryLabels.length ? ctx.mandatoryLabels : (entry.mandatoryLabels ?? []),
    resources,
    orchestratorUrl: ctx.orchestratorUrl,
    claimCode,
    ...(ctx.boundJobId ? { jobId: ctx.boundJobId } : {}),
    requestId,
  };
}
