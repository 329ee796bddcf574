/**
 * Redeems one-time claim codes for an agent identity. An agent that a cluster provisioned holds a
 * claim code, not a token; the orchestrator trades the code for a token on its first frame. The
 * event backend supplies the real store; until then a claim without a store is refused.
 */
export type ClaimResult =
  { ok: true; agentId: string; labels: string[]; token: string } | { ok: false; reason: string };

export interface ClaimStore {
  /** Single-use: a second redeem of the same code is refused. `now` is epoch ms. */
  redeem(code: string, now: number): Promise<ClaimResult>;
}
