/**
 * What an end-to-end test watches of a real orchestrator's scaler as its agents end: which agents'
 * compute it destroyed, and whether every teardown is over.
 */
import type { ScalerBackend } from '../../src/scaler/types.js';
import { scalerIdle, type TestOrchestrator } from './orchestrator.js';

/** The scaler's backend, each destroy it is asked for noted (by agent id) before it runs. */
export function noteDestroys(orch: TestOrchestrator, scaler = 'bm'): string[] {
  const destroyed: string[] = [];
  const backend: ScalerBackend = orch.orch.scaler!.state.backends.get(scaler)!;
  const destroy = backend.destroy.bind(backend);
  backend.destroy = (agentId, ctx) => {
    destroyed.push(agentId);
    return destroy(agentId, ctx);
  };
  return destroyed;
}

/** Every teardown finished: no entry left, no destroy still running. */
export const settled = (orch: TestOrchestrator) => () =>
  scalerIdle(orch.orch.scaler!) && orch.orch.scaler!.teardownsInFlight === 0;
