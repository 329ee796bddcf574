import type { Hono } from 'hono';
import { z } from 'zod';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import { tokenView } from './token-view.js';
import { bad, describeIssues, idProblem, readJsonBody } from './http-validation.js';

/** How long a rotated-out token keeps working when the caller does not say: one day. */
export const DEFAULT_ROTATE_GRACE_SECONDS = 24 * 3600;

const rotateBody = z.strictObject({
  graceSeconds: z
    .number()
    .int()
    .min(0)
    .max(90 * 24 * 3600, 'at most 7776000 (90 days)')
    .optional(),
});

/**
 * `agent token rotate`: a new token for the same static agent, while the old one keeps working
 * for a stated grace so the agent's host can be given the new one without downtime.
 */
export function registerAgentTokenRotate(
  app: Hono,
  deps: { store: Store; dispatcher: Dispatcher; clock: Clock },
): void {
  app.post('/api/v1/agents/tokens/:id/rotate', async (c) => {
    const id = c.req.param('id');
    const problem = idProblem('id', id);
    if (problem) return bad(c, [problem]);
    let graceSeconds = DEFAULT_ROTATE_GRACE_SECONDS;
    if (c.req.header('content-type')?.includes('json')) {
      const body = await readJsonBody(c);
      if (!body.ok) return bad(c, body.problems);
      const parsed = rotateBody.safeParse(body.value);
      if (!parsed.success) return bad(c, describeIssues(parsed.error));
      graceSeconds = parsed.data.graceSeconds ?? graceSeconds;
    }
    const now = new Date(deps.clock.now());
    const res = await deps.store.tokens.rotate(id, now, graceSeconds * 1000);
    if (!res)
      return c.json({ error: 'not found', problems: [`token ${id} is not a live static agent token`] }, 404);
    deps.dispatcher.noteStaticToken(res.old.agentId, res.old.labels, res.expiresAt);
    return c.json(
      {
        tokenId: res.tokenId,
        agentId: res.old.agentId,
        labels: res.old.labels,
        token: res.token,
        expiresAt: res.expiresAt,
        old: tokenView(res.old, now.getTime()),
        graceSeconds,
      },
      201,
    );
  });
}
