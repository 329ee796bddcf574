/**
 * The port between backends that put agents on a bridge (container, bare-metal job-image mode,
 * micro-VM) and the host firewall that confines them. Backends only call this; the nftables
 * implementation lives beside it in src/net and is passed in, so a backend never shells out itself.
 */

/** A label set's `networkPolicy`, as the config schema yields it. */
export interface AgentNetworkPolicy {
  /** CIDRs or addresses accepted before the private-range drops. */
  allowlist?: string[] | undefined;
  /** After the accepts, drop everything else. */
  denyAll: boolean;
  /** `<cidr|address|*>[:<port|*>]` or a bare port on the agents' gateway; replaces the default set. */
  hostAccess?: string[] | undefined;
}

/** The rules for one agent address. */
export interface AgentRuleRequest {
  agentId: string;
  scalerName: string;
  /** The agent's IPv4 address on its bridge (a container IP, a VM's leased IP). */
  ip: string;
  /** Where the agent must always reach: the orchestrator's address and port as the agent dials it. */
  orchestrator: { address: string; port: number };
  /**
   * Host services the orchestrator directs agents to (e.g. its object-storage endpoint), in the
   * `hostAccess` grammar. Part of the default host set (with DNS on the gateway); a label set's
   * `policy.hostAccess` replaces that whole set. The orchestrator itself is always reachable.
   */
  hostAccess: string[];
  policy: AgentNetworkPolicy | undefined;
}

/** Why isolation could not be set up; backends turn it into a classified spawn failure. */
export class IsolationError extends Error {
  override readonly name = 'IsolationError';
  constructor(
    message: string,
    /** What the operator can do about it, in words. */
    readonly remedy: string,
    /** `config`: the request cannot be confined as configured (retrying will not help). */
    readonly kind: 'config' | 'firewall' = 'firewall',
  ) {
    super(message);
  }
}

export interface AgentIsolation {
  /**
   * Check the firewall works here and set up what every agent shares (table, base chains); called
   * when a backend with isolation on is created, so a host that cannot confine agents fails at
   * start-up, not at the first spawn. Throws IsolationError with the remedy.
   */
  prepare?(): Promise<void>;
  /**
   * Install the rules for `req.ip`, first removing any rules left for that address (addresses are
   * recycled). Resolves only once the rules are in force. Throws IsolationError.
   */
  apply(req: AgentRuleRequest): Promise<void>;
  /** Remove the rules for this address; idempotent, and a no-op for an address with none. */
  remove(ip: string): Promise<void>;
  /** Remove rule sets for addresses not in `live` (their agents are gone); returns how many. */
  reapStale(live: ReadonlySet<string>): Promise<number>;
  /** Addresses that currently have rules (for status, orphan reports and tests). */
  listRuled(): Promise<string[]>;
}
