/**
 * Compute as the "host" sees it, independent of any backend's bookkeeping: what the contract
 * suite inspects, and what a second backend instance (after a restart) finds again.
 */
export class FakeHost {
  readonly compute = new Map<string, { owner: string }>();
  /** How many times each agent's compute was actually removed. */
  readonly removals = new Map<string, number>();
  remove(agentId: string): void {
    if (!this.compute.delete(agentId)) return;
    this.removals.set(agentId, (this.removals.get(agentId) ?? 0) + 1);
  }
  owned(owner: string): string[] {
    return [...this.compute].filter(([, c]) => c.owner === owner).map(([id]) => id);
  }
}
