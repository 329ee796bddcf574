/**
 * The HostConfig every agent container is created with. Both spawners of agent containers (the
 * container backend and bare-metal job-image mode) call this one builder, so their limits and
 * posture cannot drift apart. It sits at the top of backends/ because backend folders may not
 * import each other; container/host-config.ts re-exports it for the container backend.
 */
import type Docker from 'dockerode';
import type { EffectiveLimits } from '../types.js';

/** Fork-bomb ceiling of an agent container: fixed, not configurable, and harmless to a build. */
export const AGENT_CONTAINER_PIDS_LIMIT = 4096;

export interface AgentHostConfigInput {
  /** Enforced limits; zero or absent fields set nothing. */
  limits?: EffectiveLimits | undefined;
  /** `host:container[:ro]` bind mounts (a label set's `volumes`). */
  binds?: readonly string[] | undefined;
  /** Older name of binds; both may be given, binds first. */
  volumes?: readonly string[] | undefined;
  /** `host:address` entries (the scaler's `extraHosts`). */
  extraHosts?: readonly string[] | undefined;
  /**
   * The engine socket on this host. It is mounted, at its own path, only when `containerSocket` is
   * true: the agent then talks to the same engine under the same path it would find on a host.
   */
  engineSocket?: string | undefined;
  containerSocket?: boolean | undefined;
  /** Extra read-only mounts the spawner needs (the injected agent runtime of a job image). */
  extraBinds?: readonly string[] | undefined;
  /** The network the container joins first (the isolated agent network when isolation is on). */
  networkMode?: string | undefined;
}

/**
 * Capabilities that would let a root step read the memory of its agent (root too, and sealed, that
 * is non-dumpable): ptrace and /proc/<pid>/mem, /proc/kcore and /dev/mem, kernel modules, and the
 * tracing that SYS_ADMIN allows. The engines leave them out by default; dropping them by name keeps
 * them out on an engine whose defaults were widened.
 */
export const AGENT_CONTAINER_CAP_DROP = ['SYS_PTRACE', 'SYS_ADMIN', 'SYS_RAWIO', 'SYS_MODULE'] as const;

/**
 * Only the capabilities above are dropped, and no no-new-privileges, on purpose: with
 * KICI_EXECUTION_MODE=bare-metal the job's steps run as processes inside this very container, and
 * package managers need CHOWN, DAC_OVERRIDE, FOWNER, SETUID and SETGID, sudo needs setuid. The agent
 * hardens each nested job container instead. AutoRemove stays off because the scaler owns removal
 * (it reads the exit and the log tail of a failed start first).
 */
export function buildAgentContainerHostConfig(input: AgentHostConfigInput): Docker.HostConfig {
  const hc: Docker.HostConfig = {
    AutoRemove: false,
    PidsLimit: AGENT_CONTAINER_PIDS_LIMIT,
    CapDrop: [...AGENT_CONTAINER_CAP_DROP],
  };
  const mem = input.limits?.memBytes ?? 0;
  const cpus = input.limits?.cpus ?? 0;
  if (mem > 0) hc.Memory = Math.floor(mem);
  if (cpus > 0) hc.NanoCpus = Math.round(cpus * 1e9);
  const binds = [...(input.binds ?? []), ...(input.volumes ?? []), ...(input.extraBinds ?? [])];
  if (input.containerSocket === true && input.engineSocket)
    binds.push(`${input.engineSocket}:${input.engineSocket}`);
  if (binds.length > 0) hc.Binds = binds;
  if (input.extraHosts && input.extraHosts.length > 0) hc.ExtraHosts = [...input.extraHosts];
  if (input.networkMode) hc.NetworkMode = input.networkMode;
  return hc;
}

/** Older name of buildAgentContainerHostConfig. */
export const buildAgentHostConfig = buildAgentContainerHostConfig;
