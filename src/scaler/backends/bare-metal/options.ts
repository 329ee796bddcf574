import type { ScalerEntry } from '../../../config/index.js';
import type { Logger } from '../../../util/logger.js';
import type { AgentLimits } from './agent-limits.js';
import type { CgroupDriver } from './cgroup-driver.js';
import type { HostFacts } from './confinement.js';
import type { JobImageAgents } from './job-image.js';
import type { AgentSpawner } from './spawner/agent-spawner.js';
import type { AgentUserPool } from './users.js';

/** What a bare-metal backend is built from (index.ts passes what it chose for this host). */
export interface BareMetalBackendOptions {
  entry: ScalerEntry;
  logger: Logger;
  /** Relative `binaryPath`s are resolved against this directory (the config file's). */
  baseDir: string;
  hostEnv?: NodeJS.ProcessEnv;
  /** Grace between SIGTERM and SIGKILL on destroy. */
  stopGraceMs?: number;
  /** How limits are applied, chosen at start-up (see choose-limits.ts); wins over `cgroups`. */
  limits?: AgentLimits | undefined;
  /** Cgroup driver for `enforceCgroups: true` (injected; see detectCgroups). */
  cgroups?: CgroupDriver | undefined;
  /** Homes and uids for sandboxed and `runAsUser: dynamic` agents (host-wide by default). */
  users?: AgentUserPool;
  /** The orchestrator's data dir: hidden from sandboxed agents. */
  dataDir?: string | undefined;
  /** Agent containers of the job-image label sets; absent when the scaler has none. */
  jobImage?: JobImageAgents | undefined;
  /** What the host allows for confining jobs (probed when absent). */
  hostFacts?: HostFacts;
  /** Files no job may read (admin token, TLS key): hidden in the sandbox. */
  secretFiles?: readonly string[];
  /** Starts agent processes outside the orchestrator (see spawner/); this backend closes it at shutdown. */
  spawner?: AgentSpawner | undefined;
}
