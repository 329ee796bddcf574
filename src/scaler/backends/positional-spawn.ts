/**
 * The positional spawn form the public backend classes keep for embedding callers:
 * `spawn(labelSet, agentId, orchestratorUrl, onEvent?, effectiveLimits?, spawnContext?, signal?)`.
 * It derives the one context object the backend port takes; the manager builds that object itself.
 */
import { canonicalizeLabels, platformToTaints, type ScalerEntry } from '../../config/index.js';
import { agentLabelsFor } from '../core/routing.js';
import type {
  AgentAuth,
  EffectiveLimits,
  PositionalSpawnContext,
  ScalerEventCallback,
  SpawnContext,
} from '../types.js';

export type PositionalSpawnArgs = [
  labelSet: string[],
  agentId: string,
  orchestratorUrl: string,
  onEvent?: ScalerEventCallback,
  effectiveLimits?: EffectiveLimits,
  spawnContext?: PositionalSpawnContext,
  signal?: AbortSignal,
];

/** Which of the two forms a call used: the port form passes one object, never an array. */
export function isPositional(args: [SpawnContext] | PositionalSpawnArgs): args is PositionalSpawnArgs {
  return Array.isArray(args[0]);
}

/** Mints the agent's token, bound to its full labels; absent, no token is injected. */
export type MintToken = (agentId: string, fullLabels: string[]) => Promise<string | undefined>;

export async function contextFromPositional(
  entry: ScalerEntry,
  args: PositionalSpawnArgs,
  opts: { mint?: MintToken | undefined; claimAuth?: boolean; now?: () => number } = {},
): Promise<SpawnContext> {
  const [labelSet, agentId, orchestratorUrl, onEvent, limits, extra, signal] = args;
  const now = opts.now ?? Date.now;
  const declared = canonicalizeLabels(labelSet);
  const taints = extra?.taints ?? platformToTaints(entry.platform);
  const fullLabels = agentLabelsFor(entry, declared);
  let auth: AgentAuth;
  if (opts.claimAuth) auth = { kind: 'claim', code: '' };
  else auth = { kind: 'token', token: (await opts.mint?.(agentId, fullLabels)) ?? '' };
  return {
    agentId,
    labelSet: declared,
    fullLabels,
    mandatoryLabels: extra?.mandatoryLabels ?? [
      ...new Set(canonicalizeLabels([...entry.mandatoryLabels, ...taints])),
    ],
    taints,
    orchestratorUrl,
    auth,
    limits,
    boundJobId: extra?.boundJobId,
    runId: extra?.runId,
    image: extra?.image,
    // Nothing aborts a spawn the caller gave no signal for; it runs to its end.
    signal: signal ?? new AbortController().signal,
    onEvent: (eventType, detail) => onEvent?.({ agentId, eventType, detail, timestampMs: now() }),
  };
}
