import type { Tracked } from './tracked.js';

/**
 * The agent containers one backend holds, by agent id. The backend owns it; the modules it hands
 * it to (spawn, recovery) add and drop entries through these intents and read the rest.
 */
export class TrackedAgents {
  readonly #byId = new Map<string, Tracked>();

  get size(): number {
    return this.#byId.size;
  }

  get(agentId: string): Tracked | undefined {
    return this.#byId.get(agentId);
  }

  has(agentId: string): boolean {
    return this.#byId.has(agentId);
  }

  ids(): IterableIterator<string> {
    return this.#byId.keys();
  }

  all(): IterableIterator<Tracked> {
    return this.#byId.values();
  }

  /** A spawn or an adoption starts holding this agent's container. */
  track(agentId: string, t: Tracked): void {
    this.#byId.set(agentId, t);
  }

  /**
   * A failed spawn lets go of its own entry only: a newer spawn of the same id (after a destroy)
   * may have replaced it meanwhile.
   */
  releaseIfStill(agentId: string, t: Tracked): void {
    if (this.#byId.get(agentId) === t) this.#byId.delete(agentId);
  }

  /** The container is gone (destroyed or torn down): nothing of it is held any more. */
  forget(agentId: string): void {
    this.#byId.delete(agentId);
  }
}
