/**
 * What a backend with isolation on checks before it starts: nft on PATH (a RequiredTool for the
 * registry's preflight) and nft actually usable (a probe: the binary may exist while the process
 * lacks CAP_NET_ADMIN). And the one warning when an operator turns isolation off.
 */
import type { RequiredTool } from '../scaler/types.js';
import type { Logger } from '../util/logger.js';
import { IsolationError } from './isolation.js';
import { NFT_REMEDY } from './nft-isolation.js';
import type { NftRunner } from './nft-runner.js';

/** For `getRequiredTools(entry)` when the entry's isolation is on: start-up fails without nft. */
export function nftRequiredTool(command = 'nft'): RequiredTool {
  return {
    name: 'nft (network isolation)',
    find: { kind: 'command', command },
    fix: NFT_REMEDY,
    severity: 'fatal',
  };
}

/** `nft list tables` must work: throws IsolationError naming the scaler and the remedy otherwise. */
export async function probeNft(runner: NftRunner, scalerName: string): Promise<void> {
  try {
    await runner.list(['tables']);
  } catch (err) {
    throw new IsolationError(
      `scaler "${scalerName}": networkIsolation is on but nft does not work here: ${(err as Error).message}. Fix: ${NFT_REMEDY}`,
      NFT_REMEDY,
    );
  }
}

const warned = new WeakMap<Logger, Set<string>>();

/** `networkIsolation: false`: say once per scaler (per logger) what that means; reloads do not repeat it. */
export function warnIsolationOff(log: Logger, scalerName: string): boolean {
  let names = warned.get(log);
  if (!names) warned.set(log, (names = new Set()));
  if (names.has(scalerName)) return false;
  names.add(scalerName);
  log.warn(
    { scaler: scalerName },
    `scaler "${scalerName}": networkIsolation is false: its agents reach every network this host reaches (private ranges, cloud metadata); remove the setting to confine them`,
  );
  return true;
}
