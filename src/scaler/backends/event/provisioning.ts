import { normalizeLabelSet, type ScalerEntry } from '../../../config/index.js';
import { DEFAULT_AGENT_TOKEN_TTL_SECONDS } from '../../../config/defaults.js';
import { errorMessage } from '../../../util/errors.js';
import type { Logger } from '../../../util/logger.js';
import { SpawnError } from '../../core/spawn-errors.js';
import type { ScaleDownReason } from '../../events/payloads.js';
import type { ManagedAgent, SpawnContext } from '../../types.js';
import { Provision, scaleDownReason, scaleUpPayload, type EventScalerBackendOptions } from './options.js';

/**
 * The backend's provisions as a spawn sees them: how many there are, and its own entry, which it
 * adds and drops. The map stays the backend's.
 */
export interface ProvisionBook {
  count(): number;
  track(agentId: string, p: Provision): void;
  /** Drop this entry unless a newer spawn of the same id (after a destroy) has replaced it. */
  releaseIfStill(agentId: string, p: Provision): void;
}

/** What one event backend's scale-ups and scale-downs work with (the backend builds it once). */
export interface ProvisioningHost {
  /** The scaler's name, as events and messages name it. */
  readonly name: string;
  readonly provisions: ProvisionBook;
  /** Where claim codes are issued and scale events sent, and each request's correlation id. */
  readonly opts: Pick<EventScalerBackendOptions, 'claimStore' | 'emitter' | 'requestId'>;
  readonly log: Logger;
  now(): number;
}

/**
 * One provision, as `entry` stands now: track it, issue its claim code, emit its scale-up. After
 * each await the spawn checks it is still wanted (a destroy or the spawn's abort may have come);
 * until its scale-up is out a destroy only marks it, and the spawn tears it down itself.
 */
export async function spawnProvision(
  host: ProvisioningHost,
  entry: ScalerEntry,
  ctx: SpawnContext,
): Promise<ManagedAgent> {
  if (ctx.signal.aborted) throw new SpawnError('spawn-timeout', 'spawn aborted before start');
  const { name, provisions } = host;
  const key = normalizeLabelSet(ctx.labelSet);
  if (!entry.labelSets.some((l) => normalizeLabelSet(l.labels) === key))
    throw new SpawnError('config', `label set [${key}] is not served by event scaler "${name}"`);
  if (provisions.count() >= entry.maxAgents)
    throw new SpawnError(
      'capacity',
      `event scaler "${name}" is at capacity (${provisions.count()}/${entry.maxAgents})`,
    );
  const targets = [...(entry.provisioningTargets ?? [])];
  const spawnedAt = host.now();
  // Tracked before the first await: a destroy during the spawn finds it and cancels it.
  const p = new Provision(ctx.labelSet, spawnedAt, targets, 'spawn');
  provisions.track(ctx.agentId, p);
  const cancelled = () => p.cancelledWith ?? (ctx.signal.aborted ? 'spawn-timeout' : undefined);
  let claimCode: string;
  try {
    claimCode = await host.opts.claimStore.register({
      agentId: ctx.agentId,
      labels: ctx.fullLabels,
      agentTokenTtlSeconds: entry.agentTokenTtlSeconds ?? DEFAULT_AGENT_TOKEN_TTL_SECONDS,
      orchestratorUrl: ctx.orchestratorUrl,
    });
  } catch (err) {
    provisions.releaseIfStill(ctx.agentId, p);
    throw new SpawnError('transient', `claim code could not be issued: ${errorMessage(err)}`, {
      cause: err,
    });
  }
  if (cancelled()) {
    // Nothing was sent yet: dropping the claim is the whole teardown.
    provisions.releaseIfStill(ctx.agentId, p);
    await invalidateClaims(host, ctx.agentId);
    throw new SpawnError('spawn-timeout', 'spawn cancelled before its scale-up was sent');
  }
  const requestId = host.opts.requestId();
  const payload = scaleUpPayload(name, entry, ctx, claimCode, requestId);
  let eventId: string;
  try {
    eventId = await host.opts.emitter.emitScalerScaleUp(payload, targets);
  } catch (err) {
    provisions.releaseIfStill(ctx.agentId, p);
    await invalidateClaims(host, ctx.agentId);
    throw new SpawnError('transient', `scale-up could not be emitted: ${errorMessage(err)}`, {
      cause: err,
    });
  }
  p.scaleUpSent();
  host.log.info({ agentId: ctx.agentId, requestId, eventId, targets }, 'scale-up emitted');
  const why = cancelled();
  if (why) {
    // Destroyed or timed out while the scale-up was on its way: the instance is stopped at once.
    provisions.releaseIfStill(ctx.agentId, p);
    await teardownProvision(host, ctx.agentId, scaleDownReason(why), targets);
    throw new SpawnError('spawn-timeout', 'spawn cancelled while its scale-up was being sent');
  }
  ctx.onEvent('scaler.provisioning', `scale-up ${eventId} sent to ${targets.join(', ')}`);
  ctx.onEvent('agent.connecting', 'waiting for the provisioned instance to register');
  return { id: ctx.agentId, labelSet: ctx.labelSet, backendRef: ctx.agentId, spawnedAt, state: 'spawning' };
}

/**
 * Emit the scale-down of a provision no longer tracked, then invalidate its claim (also when the
 * emit failed, which then rejects).
 */
export async function teardownProvision(
  host: ProvisioningHost,
  agentId: string,
  reason: ScaleDownReason,
  targets: string[],
): Promise<void> {
  const requestId = host.opts.requestId();
  try {
    const eventId = await host.opts.emitter.emitScalerScaleDown(
      { scalerName: host.name, agentId, reason, requestId },
      targets,
    );
    host.log.info({ agentId, reason, requestId, eventId, targets }, 'scale-down emitted');
  } finally {
    await invalidateClaims(host, agentId);
  }
}

async function invalidateClaims(host: ProvisioningHost, agentId: string): Promise<void> {
  try {
    await host.opts.claimStore.invalidate(agentId);
  } catch (err) {
    host.log.warn(
      { agentId, err: errorMessage(err) },
      'could not invalidate the claim code; it expires on its own',
    );
  }
}
