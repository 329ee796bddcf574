import type { LiveScalerSettings } from '../cluster/live-settings.js';
import type { ScalerConfig, ScalerEntry } from '../config/index.js';
import { NftAgentIsolation } from '../net/nft-isolation.js';
import { createNftRunner } from '../net/nft-runner.js';
import type { BackendDeps } from '../scaler/backends/deps.js';
import { connectEngine } from '../scaler/backends/engine-client.js';
import { createScalerBackend } from '../scaler/backends/registry.js';
import type { ScaleEventRouter } from '../scaler/events/router.js';
import { resolveLedgerDir } from '../scaler/ledger/ledger-dir.js';
import { MachineLedger } from '../scaler/ledger/machine-ledger.js';
import { ScalerManager, type ScalerManagerOptions } from '../scaler/manager.js';
import type { Store } from '../store/index.js';
import { systemClock, type Clock } from '../util/clock.js';
import { errorMessage, UserError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { hostToolEnv } from '../util/host-tool-env.js';
import type { OrchestratorOptions } from './orchestrator-options.js';
import { defaultAdminTokenFile } from '../access/bootstrap-token.js';
import { isLoopbackHost } from './gateway-listener.js';

/** What every backend is built with: the host drivers, the store, and the default nftables isolation. */
export function backendContext(
  opts: OrchestratorOptions,
  logger: Logger,
  store: Store,
  scaleEvents?: ScaleEventRouter,
  config?: ScalerConfig,
): BackendDeps {
  return {
    ...opts.backendDeps,
    vmNetwork: config?.firecracker,
    ...(scaleEvents ? { scaleEvents } : {}),
    logger,
    clock: opts.clock ?? systemClock,
    store,
    configPath: opts.scalerConfigPath!,
    ...(opts.hostEnv ? { hostEnv: opts.hostEnv } : {}),
    ...(opts.dataDir ? { dataDir: opts.dataDir } : {}),
    // What a bare-metal job must never read, besides the data dir: hidden in its sandbox.
    secretFiles: [opts.adminTokenFile ?? defaultAdminTokenFile(), ...(opts.tls ? [opts.tls.keyPath] : [])],
    connectEngine: (entry) => connectEngine(entry, opts.hostEnv ?? process.env),
    // One nftables table for every container scaler; nft only runs once a backend with isolation on
    // uses it, and then with none of the orchestrator's credentials.
    isolation:
      opts.isolation ??
      new NftAgentIsolation({
        runner: createNftRunner({ env: hostToolEnv(opts.hostEnv ?? process.env) }),
        logger,
      }),
  };
}

export async function buildScaler(
  config: ScalerConfig,
  opts: OrchestratorOptions,
  deps: {
    store: Store;
    clock: Clock;
    log: Logger;
    instanceId: string;
    agentUrl: () => string;
    /** The URL of our agent-only listener on the gateway this scaler's agents sit behind, if open. */
    gatewayUrlFor?: (scalerName: string) => string | undefined;
    scaleEvents: ScaleEventRouter;
    /** Cluster-wide values that replace the timing below while running. */
    live?: LiveScalerSettings | undefined;
  },
): Promise<ScalerManager> {
  const backends = [];
  for (const entry of config.scalers) {
    // Preflight runs inside: a missing required tool stops start-up with a UserError naming the fix.
    const backend = await createScalerBackend(
      entry,
      backendContext(opts, deps.log, deps.store, deps.scaleEvents, config),
    ).catch((err: unknown) => {
      throw err instanceof UserError ? err : new UserError(errorMessage(err));
    });
    backends.push(backend);
  }
  let ledger: MachineLedger | undefined;
  if (config.machinePools?.length) {
    const dir = await resolveLedgerDir({
      explicitDir: opts.machineLedgerDir || process.env.KICI_MACHINE_LEDGER_DIR || undefined,
    });
    ledger = new MachineLedger({ dir, instanceId: deps.instanceId, logger: deps.log });
    for (const pool of config.machinePools) ledger.registerPool(pool.name, pool.cap);
    ledger.start();
  }
  const live = deps.live;
  const manager = new ScalerManager({
    config,
    ledger,
    backends,
    store: deps.store,
    clock: deps.clock,
    logger: deps.log,
    instanceId: deps.instanceId,
    orchestratorUrlFor: (entry: ScalerEntry) => {
      const url = entry.orchestratorUrl ?? deps.agentUrl();
      // A loopback URL is out of a container's or VM's reach: the gateway listener stands in.
      return (loopbackUrl(url) && deps.gatewayUrlFor?.(entry.name)) || url;
    },
    scaleEvents: deps.scaleEvents,
    ...managerTiming(opts),
    ...(live ? { liveAgentTokenTtlMs: () => live.get('agentTokenTtlMs') } : {}),
  });
  if (live)
    manager.state.backoff.follow(() => ({
      baseMs: live.get('scalerProvisionBackoffBaseMs'),
      maxMs: live.get('scalerProvisionBackoffMaxMs'),
      maxConsecutiveFailures: live.get('scalerProvisionMaxConsecutiveFailures'),
    }));
  return manager;
}

function loopbackUrl(url: string): boolean {
  try {
    return isLoopbackHost(new URL(url).hostname);
  } catch {
    return false;
  }
}

/** The manager's deadlines and backoff from the orchestrator's options (the manager's defaults otherwise). */
export function managerTiming(
  opts: Pick<OrchestratorOptions, 'spawnTimeoutMs' | 'agentTokenTtlMs' | 'provisionBackoff'>,
): Pick<ScalerManagerOptions, 'spawnTimeoutMs' | 'agentTokenTtlMs' | 'backoff'> {
  return {
    ...(opts.spawnTimeoutMs !== undefined ? { spawnTimeoutMs: opts.spawnTimeoutMs } : {}),
    ...(opts.agentTokenTtlMs !== undefined ? { agentTokenTtlMs: opts.agentTokenTtlMs } : {}),
    ...(opts.provisionBackoff ? { backoff: opts.provisionBackoff } : {}),
  };
}
