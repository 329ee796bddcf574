/**
 * A spawn as the backend runs it: admitted (label set known, room left, a token to hand over),
 * tracked before its first await so the active count covers it at once, then run by spawn.ts and
 * dropped again if it fails. Also the token minting of the public, positional spawn form.
 */
import { normalizeLabelSet, type ScalerEntry } from '../../../config/index.js';
import { DeterministicSpawnError, SpawnError } from '../../core/spawn-errors.js';
import type { AgentTokenStore, ManagedAgent, SpawnContext } from '../../types.js';
import type { MintToken } from '../positional-spawn.js';
import { LineTail } from './logs.js';
import { DEFAULT_TOKEN_TTL_MS } from './options.js';
import { failSpawn, runSpawn, watchExit } from './spawn.js';
import type { TrackedAgents } from './tracked-agents.js';
import type { SpawnHost, Tracked } from './tracked.js';

/** `agents` is the backend's own: the spawn adds itself, and removes itself only if still there. */
export async function spawnContainerAgent(
  host: SpawnHost,
  entry: ScalerEntry,
  agents: TrackedAgents,
  req: SpawnContext,
): Promise<ManagedAgent> {
  const key = normalizeLabelSet(req.labelSet);
  const ls = entry.labelSets.find((l) => normalizeLabelSet(l.labels) === key);
  if (!ls)
    throw new SpawnError('config', `Label set [${key}] not supported by container backend "${host.name}"`);
  if (agents.size >= entry.maxAgents)
    throw new SpawnError(
      'capacity',
      `container backend "${host.name}" at capacity (${agents.size}/${entry.maxAgents})`,
    );
  if (req.auth.kind !== 'token')
    throw new DeterministicSpawnError(
      'config',
      'container agents authenticate with a token, not a claim code',
    );
  if (req.signal.aborted) throw new SpawnError('spawn-timeout', 'spawn aborted before it started');
  const agent: ManagedAgent = {
    id: req.agentId,
    labelSet: req.labelSet,
    backendRef: '',
    spawnedAt: Date.now(),
    state: 'spawning',
  };
  const t: Tracked = {
    agent,
    tail: new LineTail(),
    registered: false,
    destroying: false,
    image: req.image ?? ls.image!,
  };
  agents.track(req.agentId, t);
  try {
    await runSpawn(host, req, ls, t);
  } catch (err) {
    const failure = await failSpawn(host, req, t, err);
    agents.releaseIfStill(req.agentId, t);
    t.tail.end();
    throw failure;
  }
  agent.state = 'running';
  watchExit(host.docker, req, t);
  req.onEvent('agent.connecting', 'waiting for the agent to register');
  return agent;
}

/**
 * How a positional spawn gets its agent's token: minted through `tokenStore` when one was given
 * (the manager mints its own for the context form); without one the agent gets none.
 */
export function positionalMint(
  tokenStore: AgentTokenStore | undefined,
  tokenTtlMs: number | undefined,
): MintToken | undefined {
  return tokenStore
    ? async (agentId: string, labels: string[]) =>
        (
          await tokenStore.mint({
            agentId,
            labels,
            kind: 'ephemeral',
            ttlMs: tokenTtlMs ?? DEFAULT_TOKEN_TTL_MS,
            now: new Date(),
          })
        ).token
    : undefined;
}
