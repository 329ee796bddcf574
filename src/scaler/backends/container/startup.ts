/**
 * What a container scaler settles before it is built: the firewall and the agent network, and from
 * them the address its agents reach this host at. Done before the backend exists so that a scaler
 * which cannot confine its agents never starts.
 */
import { warnIsolationOff } from '../../../net/nft-preflight.js';
import { ensureIsolatedNetwork, ISOLATED_NETWORK_GATEWAY, networkGateway } from './network.js';
import type { ResolvedOptions } from './options.js';

/** Prepare the agent network the options ask for; returns its gateway address (undefined when none). */
export async function prepareAgentNetwork(opts: ResolvedOptions): Promise<string | undefined> {
  if (opts.isolated) {
    if (!opts.isolation)
      throw new Error(
        `scaler "${opts.entry.name}": networkIsolation is on but no nftables firewall is available; install nftables (apt-get install nftables) and run the orchestrator with CAP_NET_ADMIN, or set networkIsolation: false in this scaler's entry`,
      );
    await opts.isolation.prepare?.();
    await ensureIsolatedNetwork(opts.docker);
    return ISOLATED_NETWORK_GATEWAY;
  }
  // Once per scaler: a reload rebuilding the backend does not repeat it.
  warnIsolationOff(opts.logger, opts.entry.name);
  return networkGateway(opts.docker, opts.runtime === 'podman' ? 'podman' : 'bridge');
}
