import { createHash, randomBytes } from 'node:crypto';
import { DEFAULT_AGENT_TOKEN_TTL_SECONDS, DEFAULT_CLAIM_TTL_SECONDS } from '../config/defaults.js';
import type { ClaimResult, ClaimStore } from '../server/claim-store.js';
import { ClaimsRepo } from '../store/claims-repo.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';

export interface ClaimSpec {
  agentId: string;
  /** The provisioned agent's full labels: the minted token is bound to exactly these. */
  labels: string[];
  agentTokenTtlSeconds?: number | undefined;
  orchestratorUrl: string;
}

/** What a redeemed claim yields (the HTTP answer of a workflow-side claim). */
export interface ClaimedCredentials {
  agentToken: string;
  agentId: string;
  orchestratorUrl: string;
  labels: string[];
}

const sha256 = (code: string) => createHash('sha256').update(code).digest('hex');

/** 64 lowercase hex characters: what `register` issues. Anything else cannot be ours. */
const CODE_SHAPE = /^[0-9a-f]{64}$/;

/**
 * Claim codes in the shared store (table scaler_pending_claims). A code is 256 random bits, handed
 * out once and kept only as its SHA-256; it redeems once, before its TTL, for an ephemeral agent
 * token scoped to the claim's agent id and labels. Without a scaler name the store only redeems
 * (any orchestrator can redeem any code through the shared table).
 */
export class StoreClaimStore implements ClaimStore {
  private readonly repo: ClaimsRepo;
  private ttlSeconds: number;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly opts: { scalerName?: string | undefined; claimTtlSeconds?: number | undefined } = {},
  ) {
    this.repo = new ClaimsRepo(store.db);
    this.ttlSeconds = opts.claimTtlSeconds ?? DEFAULT_CLAIM_TTL_SECONDS;
  }

  get defaultTtlSeconds(): number {
    return this.ttlSeconds;
  }

  /** A reload changed `claimTtlSeconds`: codes issued from now on live this long. */
  setDefaultTtlSeconds(s: number): void {
    if (Number.isFinite(s) && s > 0) this.ttlSeconds = s;
  }

  /** Issue a code for one provision; the raw code is returned once and never stored. */
  async register(spec: ClaimSpec): Promise<string> {
    const scalerName = this.opts.scalerName;
    if (!scalerName) throw new Error('registering a claim code requires a scalerName');
    const code = randomBytes(32).toString('hex');
    const now = this.clock.now();
    await this.repo.insert({
      hash: sha256(code),
      prefix: code.slice(0, 12),
      agentId: spec.agentId,
      scalerName,
      labels: spec.labels,
      agentTokenTtlMs: (spec.agentTokenTtlSeconds ?? DEFAULT_AGENT_TOKEN_TTL_SECONDS) * 1000,
      orchestratorUrl: spec.orchestratorUrl,
      expiresAt: new Date(now + this.ttlSeconds * 1000),
      now: new Date(now),
    });
    return code;
  }

  /** The session's claim step: the reason of a refusal is shown to the agent as is. */
  async redeem(code: string, now: number): Promise<ClaimResult> {
    const res = await this.claim(code, now);
    if ('error' in res) return { ok: false, reason: res.error };
    return { ok: true, agentId: res.agentId, labels: res.labels, token: res.agentToken };
  }

  /**
   * Redeem `code`; a miss says why (unknown, already used, expired, issued for another agent). With
   * `agentId`, a code issued for a different agent is refused and left unspent.
   */
  async claim(
    code: string,
    now = this.clock.now(),
    agentId?: string,
  ): Promise<ClaimedCredentials | { error: string }> {
    if (!CODE_SHAPE.test(code)) return { error: 'invalid claim code' };
    const hash = sha256(code);
    const row = await this.repo.redeem(hash, new Date(now), agentId);
    if (!row) {
      const why = await this.repo.describe(hash);
      if (!why) return { error: 'invalid claim code' };
      if (why.consumed) return { error: 'claim code already consumed' };
      if (agentId !== undefined && why.agentId !== agentId)
        return { error: `claim code was issued for another agent id, not "${agentId}"` };
      return { error: 'claim code expired' };
    }
    // The code is spent already: a failed mint does not reopen it (fail closed).
    const { token } = await this.store.tokens.mint({
      agentId: row.agent_id,
      labels: row.labels,
      kind: 'ephemeral',
      ttlMs: row.agent_token_ttl_ms,
      now: new Date(now),
    });
    return {
      agentToken: token,
      agentId: row.agent_id,
      orchestratorUrl: row.orchestrator_url,
      labels: row.labels,
    };
  }

  /** Teardown: the provision's codes can no longer be redeemed. */
  invalidate(agentId: string): Promise<number> {
    return this.repo.invalidate(agentId);
  }

  purgeExpired(cutoff: Date): Promise<number> {
    return this.repo.purgeExpired(cutoff);
  }
}
