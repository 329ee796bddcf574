import type { Context } from 'hono';
import { getCookie } from 'hono/cookie';

/** The cookie the dashboard's login sets: the pasted token itself, HttpOnly so page scripts never read it. */
export const SESSION_COOKIE = 'kici_token';

/** Whether a pasted token may log in: any live access token (its role limits what it can do). */
export type TokenCheck = (token: string) => Promise<boolean>;

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
