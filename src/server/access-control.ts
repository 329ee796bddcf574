import { getConnInfo } from '@hono/node-server/conninfo';
import type { Context, MiddlewareHandler } from 'hono';
import { roleAllows, type Role } from '../access/roles.js';
import type { AccessTokenInfo, AccessTokensRepo } from '../store/access-tokens-repo.js';
import type { AuditEntry, AuditRepo } from '../store/audit-repo.js';
import { clip } from '../jobs/safe-text.js';
import type { Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { crossSiteCookieWrite, presentedToken } from './dashboard/auth.js';
import { matchRoute } from './route-roles.js';

declare module 'hono' {
  interface ContextVariableMap {
    /** The access token that let this request in. */
    accessToken: AccessTokenInfo;
    /** What the call acted on, for the audit row, when the path alone does not say it. */
    auditTarget: string;
  }
}

export interface AccessControlDeps {
  tokens: AccessTokensRepo;
  audit: AuditRepo;
  clock: Clock;
  logger: Logger;
  /** `/metrics` answers without a token. */
  metricsPublic?: boolean;
}

/** Refusals by callers without a valid token are recorded up to this many per minute per instance. */
const ANONYMOUS_DENIALS_PER_MINUTE = 60;

function remoteOf(c: Context): string | null {
  try {
    return getConnInfo(c).remote.address ?? null;
  } catch {
    return null; // not served by a node socket (in-process requests)
  }
}

/**
 * Authentication and authorisation for every route, from the route table: a bearer access token
 * whose role covers the route's. Mutating calls and every refusal leave an audit row.
 */
export function accessControl(deps: AccessControlDeps): MiddlewareHandler {
  let window = { startMs: 0, count: 0, dropped: 0 };
  const record = async (e: Omit<AuditEntry, 'at'>, anonymous: boolean) => {
    const now = deps.clock.now();
    if (anonymous) {
      if (now - window.startMs >= 60_000) {
        if (window.dropped)
          deps.logger.warn(
            { dropped: window.dropped },
            'audit: refused anonymous calls not recorded (rate cap)',
          );
        window = { startMs: now, count: 0, dropped: 0 };
      }
      if (++window.count > ANONYMOUS_DENIALS_PER_MINUTE) return void window.dropped++;
    }
    // An audit write that fails is logged; it does not turn the caller's answer into an error.
    await deps.audit
      .record({ ...e, at: new Date(now) })
      .catch((err: unknown) =>
        deps.logger.error({ err: errorMessage(err), action: e.action }, 'audit write failed'),
      );
  };

  return async (c, next) => {
    const path = c.req.path;
    const matched = matchRoute(c.req.method, path);
    let needed = matched?.rule.access ?? (path.startsWith('/api/') ? 'viewer' : 'public');
    if (needed === 'metrics') needed = deps.metricsPublic ? 'public' : 'viewer';
    if (needed === 'public') return next();
    const role: Role = needed;
    const action = matched?.rule.action ?? `${c.req.method} ${clip(path)}`;
    const target = matched ? clip(Object.values(matched.params).join(' ')) || null : null;
    const remote = remoteOf(c);

    const secret = presentedToken(c).trim();
    const check = secret
      ? await deps.tokens.check(secret, new Date(deps.clock.now()))
      : ({ ok: false, reason: 'no token' } as const);
    if (!check.ok) {
      const known = 'token' in check ? check.token : undefined;
      await record(
        {
          tokenId: known?.id ?? null,
          tokenName: known?.name ?? null,
          role: known?.role ?? null,
          action,
          target,
          result: 'denied',
          status: 401,
          remote,
        },
        !known,
      );
      return c.json(
        {
          error: 'unauthorized',
          problems: [
            check.reason === 'no token' || check.reason === 'unknown token'
              ? 'a valid access token is required (Authorization: Bearer …, or log in at /login)'
              : `${check.reason}: ask an admin for a new access token`,
          ],
        },
        401,
      );
    }
    const token = check.token;
    const base = { tokenId: token.id, tokenName: token.name, role: token.role, action, target, remote };
    if (crossSiteCookieWrite(c)) {
      await record({ ...base, result: 'denied', status: 403 }, false);
      return c.json(
        { error: 'forbidden', problems: ['(origin): a cross-site request cannot use the login cookie'] },
        403,
      );
    }
    if (!roleAllows(token.role, role)) {
      await record({ ...base, result: 'denied', status: 403 }, false);
      return c.json(
        {
          error: 'forbidden',
          problems: [`${action} needs the ${role} role; token "${token.name}" has the ${token.role} role`],
        },
        403,
      );
    }
    c.set('accessToken', token);
    await next();
    const method = c.req.method;
    if (method === 'GET' || method === 'HEAD') return;
    const status = c.res.status;
    // One turn first: what the call set going in that turn (a submit's dispatch pass and the spawn
    // record of a new agent) reaches the embedded database, where writes queue one behind the
    // other with a sync each, before the audit row, which then still commits before the answer.
    await new Promise<void>((r) => setImmediate(r));
    await record(
      {
        ...base,
        target: c.get('auditTarget') ?? target,
        result: status < 400 ? 'ok' : 'failed',
        status,
      },
      false,
    );
  };
}
