import type { EffectiveLimits } from '../../types.js';

/** Per-agent cgroups for bare-metal `enforceCgroups` (v1 or v2, detected on the host). */
export interface CgroupDriver {
  readonly version: 1 | 2;
  /** Create the agent's group with its limits; returns the `cgroup.procs` files a process must join. */
  create(agentId: string, limits: EffectiveLimits | undefined): Promise<string[]>;
  /** Kill everything left in the group and remove it. */
  remove(agentId: string): Promise<void>;
}
