import type { ScalerEntry } from '../../../config/index.js';
import { nftRequiredTool } from '../../../net/nft-preflight.js';
import type { RequiredTool } from '../../types.js';

/**
 * With an explicit socketPath or a remote host the engine may be elsewhere: create() checks that it
 * answers. Auto-detection needs an engine on this host, and its client on PATH says one is there.
 */
export function containerTools(entry: ScalerEntry): RequiredTool[] {
  // Isolation rules are installed on this host, whichever engine runs the containers.
  const nft = entry.networkIsolation ? [nftRequiredTool()] : [];
  if (entry.host || entry.socketPath) return nft;
  const want = entry.runtime === 'auto' ? ['docker', 'podman'] : [entry.runtime];
  return [
    ...nft,
    {
      name: want.join(' or '),
      find: { kind: 'any-command', commands: want },
      fix: `install ${want.join(' or ')} on this host, or set socketPath or host in scaler "${entry.name}"`,
      severity: 'fatal',
    },
  ];
}
