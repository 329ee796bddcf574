import { timingSafeEqual } from 'node:crypto';
import type { Context } from 'hono';
import { getCookie } from 'hono/cookie';

/** The cookie the dashboard's login sets: the pasted token itself, HttpOnly so page scripts never read it. */
export const SESSION_COOKIE = 'kici_token';

/**
 * The one place that says whether a presented token may use the API. Today it is the admin token;
 * role-based tokens plug in here (and may answer per route).
 */
export type TokenCheck = (token: string) => boolean;

export function adminTokenCheck(adminToken: string): TokenCheck {
  const want = Buffer.from(adminToken);
  return (token) => {
    const got = Buffer.from(token);
    return got.length === want.length && timingSafeEqual(got, want);
  };
}

/** The token a request presents: `Authorization: Bearer …`, else the dashboard's session cookie. */
export function presentedToken(c: Context): string {
  const header = c.req.header('authorization') ?? '';
  if (header.startsWith('Bearer ')) return header.slice(7);
  return getCookie(c, SESSION_COOKIE) ?? '';
}

/**
 * A cookie rides along on cross-site requests unless told not to; a state-changing request that
 * authenticates by cookie must come from our own page (SameSite=Strict plus this Origin check).
 */
export function crossSiteCookieWrite(c: Context): boolean {
  if (c.req.method === 'GET' || c.req.method === 'HEAD') return false;
  if ((c.req.header('authorization') ?? '').startsWith('Bearer ')) return false;
  const origin = c.req.header('origin');
  if (!origin) return false;
  return origin !== new URL(c.req.url).origin;
}
