import { randomUUID } from 'node:crypto';
import { dirname, resolve } from 'node:path';
import type { Kysely } from 'kysely';
import { readRunFile } from '../../jobs/run-file.js';
import type { Sealed } from '../../dispatch/sealed-env.js';
import type { RunSpec } from '../../jobs/run-spec.js';
import type { Database } from '../../store/schema.js';
import { errorMessage, UserError } from '../../util/errors.js';
import type { Logger } from '../../util/logger.js';
import type { DeliveryProblem } from '../types.js';
import { DeliveriesRepo } from './deliveries-repo.js';
import { provisioningRun, sealClaimCode } from './provisioning-run.js';
import { readJobTarget } from './job-target.js';
import {
  SCALE_DOWN_EVENT,
  SCALE_UP_EVENT,
  type ScaleEventName,
  type ScalerEventEmitterLike,
  type ScalerScaleDownPayload,
  type ScalerScaleUpPayload,
} from './payloads.js';
import { DEFAULT_WEBHOOK_RETRY, deliverWebhook, type WebhookRetryPolicy } from './webhook.js';

/** Where the env of the orchestrator names the webhook signing secret. */
export const WEBHOOK_SECRET_ENV = 'KICI_SCALER_WEBHOOK_SECRET';

/** Counts the router reports as metrics; optional so tests and tools can leave it out. */
export interface ScaleEventObserver {
  scaleUpEmitted(scaler: string): void;
  scaleDownEmitted(scaler: string, reason: string): void;
  provisionTimedOut(scaler: string): void;
  deliveryGivenUp(scaler: string, problem: DeliveryProblem): void;
  /** An event that reached no receiver: no target configured, or a target of no known kind. */
  eventUnmatched?(eventName: string, reason: 'no-targets' | 'unknown-target'): void;
}

export interface ScaleEventRouterOptions {
  db: Kysely<Database>;
  logger: Logger;
  /** The scaler config file: `job:` paths are relative to its directory. */
  configPath: string;
  hostEnv?: NodeJS.ProcessEnv;
  webhookRetry?: Partial<WebhookRetryPolicy>;
  now?: () => number;
}

type Submit = (
  spec: RunSpec,
  sealed?: Sealed,
) => Promise<{ runId: string; jobs: { id: string; name: string }[] }>;

/**
 * Delivers scale events to provisioning targets. `job:<file>` submits the template to our own
 * queue with the event in its environment; `webhook:<url>` POSTs the signed payload, retrying in the
 * background until a 2xx or the give-up time. Every delivery is recorded (scaler_event_deliveries).
 * emit resolves once each target has its record (and a job target its job), not when a webhook
 * answers: a slow receiver must not hold a spawn.
 */
export class ScaleEventRouter implements ScalerEventEmitterLike {
  private submit: Submit | undefined;
  private observer: ScaleEventObserver | undefined;
  private readonly repo: DeliveriesRepo;
  private readonly retry: WebhookRetryPolicy;
  private readonly stop = new AbortController();
  private readonly inflight = new Set<Promise<unknown>>();
  private readonly log: Logger;

  constructor(private readonly opts: ScaleEventRouterOptions) {
    this.repo = new DeliveriesRepo(opts.db);
    this.retry = { ...DEFAULT_WEBHOOK_RETRY, ...opts.webhookRetry };
    this.log = opts.logger.child({ component: 'scale-events' });
  }

  /** The queue exists after the scaler: job targets work once it is bound. */
  bind(submit: Submit, observer?: ScaleEventObserver): void {
    this.submit = submit;
    this.observer = observer;
  }

  get deliveries(): DeliveriesRepo {
    return this.repo;
  }

  /** Fails with a UserError naming the field when a target of `targets` cannot work. */
  checkTargets(scaler: string, targets: readonly string[]): void {
    if (targets.some((t) => t.startsWith('webhook:')) && !this.secret())
      throw new UserError(
        `scaler "${scaler}": provisioningTargets has a webhook target but ${WEBHOOK_SECRET_ENV} is not set; ` +
          'set it to the secret the receiver verifies signatures with',
      );
  }

  async emitScalerScaleUp(payload: ScalerScaleUpPayload, targets: string[]): Promise<string> {
    const id = await this.emit(SCALE_UP_EVENT, payload, targets, null);
    this.observer?.scaleUpEmitted(payload.scalerName);
    return id;
  }

  async emitScalerScaleDown(payload: ScalerScaleDownPayload, targets: string[]): Promise<string> {
    const id = await this.emit(SCALE_DOWN_EVENT, payload, targets, payload.reason);
    this.observer?.scaleDownEmitted(payload.scalerName, payload.reason);
    if (payload.reason === 'spawn-timeout') this.observer?.provisionTimedOut(payload.scalerName);
    return id;
  }

  private async emit(
    name: ScaleEventName,
    payload: ScalerScaleUpPayload | ScalerScaleDownPayload,
    targets: string[],
    reason: string | null,
  ): Promise<string> {
    if (!targets.length) {
      this.observer?.eventUnmatched?.(name, 'no-targets');
      throw new Error(`scaler "${payload.scalerName}" has no provisioning targets`);
    }
    const eventId = randomUUID();
    const now = new Date(this.now());
    // The claim code is a credential: the record keeps only its first characters.
    const shown: Record<string, unknown> = { ...payload };
    if ('claimCode' in payload) shown.claimCode = `${payload.claimCode.slice(0, 12)}…`;
    for (const target of targets) {
      await this.repo.insert({
        eventId,
        target,
        eventName: name,
        scalerName: payload.scalerName,
        agentId: payload.agentId,
        reason,
        payload: shown,
        now,
      });
    }
    // Targets are independent: once one has the event, the instance may boot from it, so a broken
    // sibling must not fail the emit (the caller would void the claim and provision again).
    const failures: unknown[] = [];
    for (const target of targets) {
      try {
        if (target.startsWith('job:')) await this.runJob(eventId, name, target, payload);
        else if (target.startsWith('webhook:')) this.track(this.sendWebhook(eventId, name, target, payload));
        else {
          this.observer?.eventUnmatched?.(name, 'unknown-target');
          throw new Error(`"${target}" is not a provisioning target (job:<file> or webhook:<url>)`);
        }
      } catch (err) {
        failures.push(err);
      }
    }
    if (failures.length === targets.length) {
      const first = failures[0];
      if (failures.length === 1) throw first;
      throw new Error(`no provisioning target took the event: ${failures.map(errorMessage).join('; ')}`, {
        cause: first,
      });
    }
    for (const err of failures)
      this.log.error(
        {
          eventId,
          event: name,
          scaler: payload.scalerName,
          agentId: payload.agentId,
          err: errorMessage(err),
        },
        'a provisioning target failed; the others have the event',
      );
    return eventId;
  }

  private async runJob(
    eventId: string,
    name: ScaleEventName,
    target: string,
    payload: ScalerScaleUpPayload | ScalerScaleDownPayload,
  ): Promise<void> {
    const file = target.slice('job:'.length);
    let path = resolve(dirname(this.opts.configPath), file);
    try {
      if (!this.submit) throw new Error('the job queue is not running');
      const read = await readJobTarget(this.opts.configPath, file);
      path = read.path;
      const template = await readRunFile(read.path, read.text);
      const { spec, sealed } = sealClaimCode(provisioningRun(template, name, eventId, payload), payload);
      const res = await this.submit(spec, sealed);
      await this.repo.update(
        eventId,
        target,
        { state: 'delivered', attempts: 1, lastError: null, jobId: res.jobs[0]?.id ?? '' },
        new Date(this.now()),
      );
      this.log.info({ eventId, event: name, target, runId: res.runId }, 'provisioning job submitted');
    } catch (err) {
      const message = `${path}: ${errorMessage(err)}`;
      await this.repo
        .update(eventId, target, { state: 'given-up', attempts: 1, lastError: message }, new Date(this.now()))
        .catch((e: unknown) =>
          this.log.warn({ eventId, err: errorMessage(e) }, 'could not record a delivery'),
        );
      this.observer?.deliveryGivenUp(payload.scalerName, {
        eventId,
        event: name,
        target,
        agentId: payload.agentId,
        lastError: message,
        atMs: this.now(),
      });
      throw new Error(`provisioning job ${target} could not be submitted: ${message}`, { cause: err });
    }
  }

  private async sendWebhook(
    eventId: string,
    name: ScaleEventName,
    target: string,
    payload: ScalerScaleUpPayload | ScalerScaleDownPayload,
  ): Promise<void> {
    const url = target.slice('webhook:'.length);
    const secret = this.secret();
    if (!secret) {
      // Never sent unsigned: a receiver could not tell it from a forgery.
      const why = `not sent: ${WEBHOOK_SECRET_ENV} is not set`;
      await this.repo
        .update(eventId, target, { state: 'given-up', lastError: why }, new Date(this.now()))
        .catch((e: unknown) =>
          this.log.warn({ eventId, err: errorMessage(e) }, 'could not record a delivery'),
        );
      this.observer?.deliveryGivenUp(payload.scalerName, {
        eventId,
        event: name,
        target,
        agentId: payload.agentId,
        lastError: why,
        atMs: this.now(),
      });
      return;
    }
    const body = JSON.stringify({ eventId, event: name, payload });
    const record = (set: Parameters<DeliveriesRepo['update']>[2]) =>
      this.repo
        .update(eventId, target, set, new Date(this.now()))
        .catch((e: unknown) =>
          this.log.warn({ eventId, err: errorMessage(e) }, 'could not record a delivery'),
        );
    const out = await deliverWebhook(url, { secret, eventId, eventName: name, body }, this.retry, {
      stop: this.stop.signal,
      now: () => this.now(),
      // A success keeps the last error: `event show` tells what the receiver did before it.
      onAttempt: (attempts, error) => record({ attempts, ...(error ? { lastError: error } : {}) }),
    });
    if (out.delivered) {
      await record({ state: 'delivered' });
      this.log.info({ eventId, event: name, url, attempts: out.attempts }, 'webhook delivered');
      return;
    }
    const why = `gave up after ${out.attempts} attempts: ${out.lastError ?? 'stopped'}`;
    await record({ state: 'given-up', lastError: why });
    this.observer?.deliveryGivenUp(payload.scalerName, {
      eventId,
      event: name,
      target,
      agentId: payload.agentId,
      lastError: why,
      atMs: this.now(),
    });
    this.log.error(
      { eventId, event: name, url, scaler: payload.scalerName, agentId: payload.agentId },
      `webhook delivery ${why}`,
    );
  }

  private track(p: Promise<unknown>): void {
    const settled = p.catch((err: unknown) =>
      this.log.error({ err: errorMessage(err) }, 'webhook delivery failed'),
    );
    this.inflight.add(settled);
    void settled.finally(() => this.inflight.delete(settled));
  }

  /** Webhook retries under way (tests wait on them). */
  async settle(): Promise<void> {
    while (this.inflight.size) await Promise.allSettled([...this.inflight]);
  }

  /** Orchestrator stop: retries end now; their records keep the last error. */
  async close(): Promise<void> {
    this.stop.abort();
    await this.settle();
  }

  private secret(): string | undefined {
    return (this.opts.hostEnv ?? process.env)[WEBHOOK_SECRET_ENV] || undefined;
  }

  private now(): number {
    return (this.opts.now ?? Date.now)();
  }
}
