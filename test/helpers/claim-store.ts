import { createHash } from 'node:crypto';
import type { ClaimResult, ClaimStore } from '../../src/server/claim-store.js';
import type { Store } from '../../src/store/index.js';

const hash = (code: string) => createHash('sha256').update(code).digest('hex');

/**
 * An in-memory claim store for tests: codes are kept only as hashes, each redeems once, and each
 * expires. Redeeming mints a real agent token in the store, so the agent's `register` that follows
 * is checked like any other.
 */
export class MemoryClaimStore implements ClaimStore {
  private readonly codes = new Map<
    string,
    { agentId: string; labels: string[]; expiresAtMs: number; used: boolean; ephemeral: boolean }
  >();
  redeemed = 0;

  /** The store may be set after construction: an orchestrator opens its own at start. */
  constructor(public store?: Store) {}

  add(
    code: string,
    spec: { agentId: string; labels: string[]; expiresAtMs: number; ephemeral?: boolean },
  ): void {
    this.codes.set(hash(code), { ...spec, used: false, ephemeral: spec.ephemeral ?? false });
  }

  async redeem(code: string, now: number): Promise<ClaimResult> {
    const c = this.codes.get(hash(code));
    if (!c) return { ok: false, reason: 'unknown claim code' };
    if (c.used) return { ok: false, reason: 'claim code already used' };
    if (c.expiresAtMs <= now) return { ok: false, reason: 'claim code expired' };
    c.used = true;
    this.redeemed++;
    if (!this.store) throw new Error('MemoryClaimStore has no store');
    const { token } = await this.store.tokens.mint({
      agentId: c.agentId,
      labels: c.labels,
      kind: c.ephemeral ? 'ephemeral' : 'static',
      now: new Date(now),
    });
    return { ok: true, agentId: c.agentId, labels: c.labels, token };
  }
}
