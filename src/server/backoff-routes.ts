/** `POST /api/v1/scaler/reset-backoff`: lift a label set's provisioning backoff once its cause is fixed. */
import type { Hono } from 'hono';
import { z } from 'zod';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import { bad, describeIssues, readJsonBody } from './http-validation.js';

const bodySchema = z.strictObject({
  scaler: z.string().min(1).max(128),
  /** A label set as status shows it (its labels joined by ","); without it, every one of the scaler. */
  labelSet: z.string().min(1).max(8192).optional(),
});

export function registerBackoffRoutes(
  app: Hono,
  deps: { dispatcher: Dispatcher; logger: Logger; clock: Clock },
): void {
  app.post('/api/v1/scaler/reset-backoff', async (c) => {
    const body = await readJsonBody(c);
    if (!body.ok) return bad(c, body.problems);
    const parsed = bodySchema.safeParse(body.value);
    if (!parsed.success) return bad(c, describeIssues(parsed.error));
    const { scaler: name, labelSet } = parsed.data;
    const scaler = deps.dispatcher.scaler;
    if (!scaler?.scalerEntries().some((e) => e.entry.name === name))
      return c.json(
        { error: 'not found', problems: [`scaler: no scaler named ${JSON.stringify(name)}`] },
        404,
      );
    const cleared = scaler.backoff.clear(name, labelSet, { by: 'operator', atMs: deps.clock.now() });
    deps.logger.info({ scaler: name, labelSet, cleared }, 'provisioning backoff reset by an operator');
    scaler.notifyCapacityFreed();
    return c.json({ scaler: name, cleared });
  });
}
