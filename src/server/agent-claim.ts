import type { Clock } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { claimSchema, describeIssues } from './agent-messages.js';
import type { ClaimStore } from './claim-store.js';
import type { SessionPort } from './session-port.js';
import type { RefusalKind } from './session-table.js';

/** What a claim reads of the session's dependencies. */
export interface ClaimDeps {
  clock: Clock;
  isStopping: () => boolean;
  /** Redeems claim codes; without one a `claim` is refused with 4401. */
  claimStore?: ClaimStore | undefined;
}

/**
 * What a claim may touch of its session: it reads, answers on the port and refuses; the session's
 * state moves only through the intents below.
 */
export interface ClaimHost {
  readonly deps: ClaimDeps;
  readonly log: Logger;
  readonly port: SessionPort;
  refuse(kind: RefusalKind, reason: string): void;
  /** The code is on its way to the claim store: the session is `claiming`. */
  claiming(): void;
  /** The code was good: the session is `claimed` and waits for the register. */
  claimed(): void;
}

/**
 * A provisioned agent's first frame: its one-time claim code is traded for a token, with which it
 * then registers on the same connection (see claim-store.ts).
 */
export async function onClaim(host: ClaimHost, raw: unknown): Promise<void> {
  const parsed = claimSchema.safeParse(raw);
  if (!parsed.success)
    return host.refuse('malformed', `invalid claim message: ${describeIssues(parsed.error)}`);
  if (host.deps.isStopping()) return host.refuse('shutting-down', 'orchestrator is shutting down');
  const claims = host.deps.claimStore;
  if (!claims)
    return host.refuse(
      'no-claim-store',
      'claim codes are not accepted: this orchestrator has no claim store',
    );
  host.claiming();
  let res;
  try {
    res = await claims.redeem(parsed.data.code, host.deps.clock.now());
  } catch (err) {
    host.log.error({ err: errorMessage(err) }, 'claim store failed');
    return host.refuse('store-unavailable', 'Claim store unavailable');
  }
  if (!res.ok) return host.refuse('claim-refused', `claim refused: ${res.reason}`);
  host.claimed();
  host.log.info({ agentId: res.agentId }, 'claim code redeemed');
  host.port.send({ type: 'claim.ack', agentId: res.agentId, token: res.token, labels: res.labels });
}
