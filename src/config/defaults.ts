/** Defaults of the scaler configuration, named so code and docs quote one source. */

/**
 * Default per-backend `maxConcurrentSpawns`. Bounds the provisioning rate (image
 * pull + create + start) so a burst of queued jobs cannot storm the container
 * socket / registry.
 */
export const DEFAULT_MAX_CONCURRENT_SPAWNS = 8;
export const DEFAULT_GLOBAL_MAX_AGENTS = 50;
export const DEFAULT_WARM_POOL_IDLE_TIMEOUT_SECONDS = 300;
export const DEFAULT_CLAIM_TTL_SECONDS = 300;
export const DEFAULT_AGENT_TOKEN_TTL_SECONDS = 600;
export const DEFAULT_FIRECRACKER_VCPU_COUNT = 2;
export const DEFAULT_FIRECRACKER_MEM_SIZE_MIB = 512;
export const DEFAULT_JAILER_CHROOT_BASE_DIR = '/srv/jailer';

export const DEFAULT_FIRECRACKER_NETWORK = {
  cidr: '10.0.0.0/24',
  bridgeName: 'kici-br0',
  gateway: '10.0.0.1',
  netmask: '255.255.255.0',
  table: 'kici',
  autoProvisionHost: true,
} as const;
