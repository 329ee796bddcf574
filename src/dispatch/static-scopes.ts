import type { Store } from '../store/index.js';
import type { QueuedJob } from './job-queue.js';

/**
 * The label sets of static agents that hold a live token. Such an agent may connect at any time,
 * so a job only it could run waits for it instead of failing as having no backend.
 */
export class StaticScopes {
  private readonly scopes = new Map<string, { labels: Set<string>; expiresAtMs: number | null }>();

  note(agentId: string, labels: readonly string[], expiresAt: Date | null): void {
    this.scopes.set(agentId, { labels: new Set(labels), expiresAtMs: expiresAt?.getTime() ?? null });
  }

  /** Read them all again: a revoked token no longer keeps its labels' jobs waiting. */
  async reload(store: Store, now: Date): Promise<void> {
    const scopes = await store.tokens.staticScopes(now);
    this.scopes.clear();
    for (const s of scopes) this.note(s.agentId, s.labels, s.expiresAt);
  }

  /** Could a known static agent (connected or not) ever take this job? */
  could(job: Pick<QueuedJob, 'runsOn'>, nowMs: number): boolean {
    for (const s of this.scopes.values()) {
      if (s.expiresAtMs !== null && s.expiresAtMs <= nowMs) continue;
      if (job.runsOn.every((l) => s.labels.has(l))) return true;
    }
    return false;
  }
}
