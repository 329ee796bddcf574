/** `POST /api/v1/scaler/reset-backoff`: lift a label set's provisioning backoff once its cause is fixed. */
import type { Hono } from 'hono';
import { z } from 'zod';
import type { BackoffResetFanout, BackoffResetOrder } from '../cluster/backoff-resets.js';
import type { PeerPart } from '../cluster/cluster-view.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import { bad, describeIssues, readJsonBody } from './http-validation.js';

const bodySchema = z.strictObject({
  scaler: z.string().min(1).max(128),
  /** A label set as status shows it (its labels joined by ","); without it, every one of the scaler. */
  labelSet: z.string().min(1).max(8192).optional(),
});

export interface BackoffRouteDeps {
  dispatcher: Dispatcher;
  logger: Logger;
  clock: Clock;
  /** This instance, named as the one the request went to. */
  instanceId: string;
  /** Clustering: the order reaches every live instance; absent (or undefined) on one instance. */
  backoffResets?: (() => BackoffResetFanout | undefined) | undefined;
  /** Clustering: the peers' published parts, so a scaler only a peer runs can be named too. */
  peerParts?: (() => Promise<PeerPart[]>) | undefined;
}

/** A live peer publishes a scaler of this name. */
async function peerRuns(deps: BackoffRouteDeps, name: string): Promise<boolean> {
  const peers = (await deps.peerParts?.()) ?? [];
  return peers.some(
    (p) =>
      p.state === 'alive' && p.part.scalerStatus.scalers.some((s) => (s as { name?: unknown }).name === name),
  );
}

/** Lift the backoff in this instance's scaler, and let the queue use the capacity it frees. */
export function applyBackoffReset(dispatcher: Dispatcher, log: Logger, order: BackoffResetOrder): string[] {
  const scaler = dispatcher.scaler;
  if (!scaler) return [];
  const cleared = scaler.backoff.clear(order.scaler, order.labelSet, {
    by: 'operator',
    atMs: order.atMs,
    requestedBy: order.requestedBy,
    via: order.via,
  });
  log.info(
    {
      scaler: order.scaler,
      labelSet: order.labelSet,
      cleared,
      requestedBy: order.requestedBy,
      via: order.via,
    },
    'provisioning backoff reset by an operator',
  );
  scaler.notifyCapacityFreed();
  return cleared;
}

export function registerBackoffRoutes(app: Hono, deps: BackoffRouteDeps): void {
  app.post('/api/v1/scaler/reset-backoff', async (c) => {
    const body = await readJsonBody(c);
    if (!body.ok) return bad(c, body.problems);
    const parsed = bodySchema.safeParse(body.value);
    if (!parsed.success) return bad(c, describeIssues(parsed.error));
    const { scaler: name, labelSet } = parsed.data;
    const fanout = deps.backoffResets?.();
    const here = deps.dispatcher.scaler?.scalerEntries().some((e) => e.entry.name === name) ?? false;
    if (!here && !(fanout && (await peerRuns(deps, name))))
      return c.json(
        {
          error: 'not found',
          problems: [
            `scaler: no scaler named ${JSON.stringify(name)}${fanout ? ' on any live instance' : ''}`,
          ],
        },
        404,
      );
    const order = {
      scaler: name,
      labelSet,
      requestedBy: c.get('accessToken')?.name ?? null,
      atMs: deps.clock.now(),
    };
    if (!fanout) {
      const cleared = applyBackoffReset(deps.dispatcher, deps.logger, { ...order, via: deps.instanceId });
      return c.json({ scaler: name, cleared });
    }
    const { instances } = await fanout.request(order);
    // Every label set lifted anywhere, in the order instances reported them.
    const cleared = [...new Set(instances.flatMap((i) => i.cleared))];
    return c.json({ scaler: name, cleared, instances });
  });
}
