import type { Hono } from 'hono';
import { z } from 'zod';
import { ROLES } from '../access/roles.js';
import type { AccessTokenInfo } from '../store/access-tokens-repo.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import { bad, describeIssues, MAX_TOKEN_TTL_SECONDS, readJsonBody } from './http-validation.js';
import { parseDurationMs } from '../util/duration.js';

export interface AccessRoutesDeps {
  store: Store;
  clock: Clock;
}

const createBody = z.strictObject({
  name: z
    .string()
    .regex(
      /^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$/,
      'a name of letters, digits, ".", "_", "@", "-" (at most 64)',
    ),
  role: z.enum(ROLES, { message: `one of ${ROLES.join(', ')}` }),
  expiresInSeconds: z
    .number()
    .int()
    .positive()
    .max(MAX_TOKEN_TTL_SECONDS, `at most ${MAX_TOKEN_TTL_SECONDS} (10 years)`)
    .optional(),
});

export function accessTokenView(t: AccessTokenInfo, nowMs: number) {
  const state = t.revokedAt
    ? 'revoked'
    : t.expiresAt && t.expiresAt.getTime() <= nowMs
      ? 'expired'
      : 'active';
  return { ...t, state };
}

/** Operators' access tokens (admin only, per the route table) and the audit trail. */
export function registerAccessRoutes(app: Hono, deps: AccessRoutesDeps): void {
  const { store } = deps;
  app.post('/api/v1/access/tokens', async (c) => {
    const body = await readJsonBody(c);
    if (!body.ok) return bad(c, body.problems);
    const parsed = createBody.safeParse(body.value);
    if (!parsed.success) return bad(c, describeIssues(parsed.error));
    const { name, role, expiresInSeconds } = parsed.data;
    c.set('auditTarget', name);
    if (await store.accessTokens.nameTaken(name))
      return c.json({ error: 'conflict', problems: [`name: a live token is already called "${name}"`] }, 409);
    const made = await store.accessTokens.create({
      name,
      role,
      now: new Date(deps.clock.now()),
      ttlMs: expiresInSeconds ? expiresInSeconds * 1000 : undefined,
      createdBy: c.get('accessToken')?.name ?? null,
    });
    return c.json({ id: made.info.id, name, role, token: made.token, expiresAt: made.info.expiresAt }, 201);
  });

  app.get('/api/v1/access/tokens', async (c) => {
    const all = c.req.query('all');
    if (all !== undefined && all !== 'true' && all !== 'false') return bad(c, ['all: true or false']);
    const now = deps.clock.now();
    const tokens = await store.accessTokens.list({ all: all === 'true' });
    return c.json({ tokens: tokens.map((t) => accessTokenView(t, now)) });
  });

  app.delete('/api/v1/access/tokens/:id', async (c) => {
    const id = c.req.param('id');
    if (!/^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$/.test(id))
      return bad(c, ['id: a token id or name (letters, digits, ".", "_", "@", "-")']);
    const info = await store.accessTokens.revoke(id, new Date(deps.clock.now()));
    if (!info) return c.json({ error: 'not found', problems: [`access token ${id} does not exist`] }, 404);
    c.set('auditTarget', `${info.id} (${info.name})`);
    return c.json(accessTokenView(info, deps.clock.now()));
  });

  app.get('/api/v1/audit', async (c) => {
    const sinceRaw = c.req.query('since');
    let since: Date | undefined;
    if (sinceRaw !== undefined) {
      const ms = parseDurationMs(sinceRaw);
      const at = ms === undefined ? Date.parse(sinceRaw) : deps.clock.now() - ms;
      if (!Number.isFinite(at))
        return bad(c, ['since: a duration (30m, 12h, 7d) or an ISO time (2026-01-31T12:00:00Z)']);
      since = new Date(at);
    }
    const limitRaw = c.req.query('limit');
    const limit = limitRaw === undefined ? 1000 : Number(limitRaw);
    if (!Number.isInteger(limit) || limit < 1 || limit > 10_000)
      return bad(c, ['limit: an integer from 1 to 10000']);
    const entries = await store.audit.list({ ...(since ? { since } : {}), limit });
    return c.json({ entries });
  });
}
