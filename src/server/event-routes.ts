/** Event-scaler routes: claim redemption over HTTP, and `event list` / `event show` (admin). */
import type { Hono } from 'hono';
import { z } from 'zod';
import { StoreClaimStore } from '../scaler/claim-store.js';
import { DeliveriesRepo, type DeliveryRow } from '../scaler/events/deliveries-repo.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import { SCALER_NAME_PATTERN } from '../config/entry-schema.js';
import { quote } from '../jobs/safe-text.js';
import { SCALE_DOWN_EVENT, SCALE_UP_EVENT } from '../scaler/events/payloads.js';
import { bad, describeIssues, idProblem, readJsonBody } from './http-validation.js';

const EVENT_NAMES: string[] = [SCALE_UP_EVENT, SCALE_DOWN_EVENT];

export interface EventRouteDeps {
  store: Store;
  clock: Clock;
  logger: Logger;
}

const claimBodySchema = z.strictObject({
  claimCode: z.string().min(1).max(200),
  /** When given, a code issued for another agent id is refused and left unspent. */
  agentId: z.string().min(1).max(128).optional(),
});

/** A delivery as the API shows it: the payload's claim code is already cut to a prefix in the store. */
export function deliveryView(r: DeliveryRow) {
  return {
    eventId: r.event_id,
    event: r.event_name,
    scaler: r.scaler_name,
    agentId: r.agent_id,
    reason: r.reason,
    target: r.target,
    state: r.state,
    attempts: r.attempts,
    lastError: r.last_error,
    jobId: r.job_id,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

export function registerEventRoutes(app: Hono, deps: EventRouteDeps): void {
  const claims = new StoreClaimStore(deps.store, deps.clock);
  const deliveries = new DeliveriesRepo(deps.store.db);

  // Not under /api/v1: a provisioning workflow holds a claim code, never an admin token.
  app.post('/scaler/claim', async (c) => {
    const body = await readJsonBody(c);
    if (!body.ok) return bad(c, body.problems);
    const parsed = claimBodySchema.safeParse(body.value);
    if (!parsed.success) return bad(c, describeIssues(parsed.error));
    const res = await claims.claim(parsed.data.claimCode, deps.clock.now(), parsed.data.agentId);
    if ('error' in res) {
      deps.logger.warn({ component: 'claim-http', reason: res.error }, 'claim refused');
      return c.json({ error: 'claim refused', problems: [res.error] }, 403);
    }
    deps.logger.info({ component: 'claim-http', agentId: res.agentId }, 'claim code redeemed over HTTP');
    c.header('cache-control', 'no-store');
    return c.json(res);
  });

  app.get('/api/v1/events', async (c) => {
    const name = c.req.query('name');
    const scaler = c.req.query('scaler');
    const problems = [
      ...(name && !EVENT_NAMES.includes(name)
        ? [`name: one of ${EVENT_NAMES.join(', ')}, got ${quote(name, 60)}`]
        : []),
      ...(scaler && !SCALER_NAME_PATTERN.test(scaler)
        ? [`scaler: ${quote(scaler, 60)} is not a scaler name`]
        : []),
    ];
    if (problems.length) return bad(c, problems);
    const rows = await deliveries.list({
      ...(name ? { eventName: name } : {}),
      ...(scaler ? { scalerName: scaler } : {}),
    });
    return c.json({ events: rows.map(deliveryView) });
  });

  app.get('/api/v1/events/:id', async (c) => {
    const id = c.req.param('id');
    const problem = idProblem('id', id);
    if (problem) return bad(c, [problem]);
    const rows = await deliveries.get(id);
    if (!rows.length) return c.json({ error: 'not found', problems: [`event ${id} does not exist`] }, 404);
    const first = rows[0]!;
    return c.json({
      eventId: first.event_id,
      event: first.event_name,
      scaler: first.scaler_name,
      agentId: first.agent_id,
      reason: first.reason,
      payload: first.payload,
      deliveries: rows.map(deliveryView),
    });
  });
}
