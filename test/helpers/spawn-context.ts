import type { SpawnContext } from '../../src/scaler/types.js';

/**
 * A backend's spawn request for `agentId` with the given labels and nothing else set: a token, no
 * limits, no bound job, an orchestrator URL no agent reaches. Tests override what they look at.
 */
export function spawnContext(
  agentId: string,
  labels: string[],
  over: Partial<SpawnContext> = {},
): SpawnContext {
  return {
    agentId,
    labelSet: labels,
    fullLabels: labels,
    mandatoryLabels: [],
    taints: [],
    orchestratorUrl: 'ws://127.0.0.1:1/ws',
    auth: { kind: 'token', token: 't' },
    limits: undefined,
    boundJobId: undefined,
    runId: undefined,
    image: undefined,
    signal: new AbortController().signal,
    onEvent: () => undefined,
    ...over,
  };
}
