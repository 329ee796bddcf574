import type { TokenInfo } from '../store/tokens-repo.js';
import { EXPIRING_SOON_MS } from './http-validation.js';

/** An agent token as the API shows it: its state now, and whether it expires soon. */
export function tokenView(t: TokenInfo, nowMs: number) {
  const state = t.revokedAt
    ? 'revoked'
    : t.expiresAt && t.expiresAt.getTime() <= nowMs
      ? 'expired'
      : 'active';
  const expiresSoon =
    state === 'active' && t.expiresAt !== null && t.expiresAt.getTime() - nowMs <= EXPIRING_SOON_MS;
  return { ...t, state, expiresSoon };
}
