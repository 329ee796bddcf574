import type { ClaimRequest } from '../store/claim-candidates.js';
import type { ConnectedAgent } from './connected-agent.js';
import type { JobQueue, QueuedJob } from './job-queue.js';

/** A queued job taken for an agent, its claim not yet stored. */
export interface Taken {
  job: QueuedJob;
  agent: ConnectedAgent;
}

/** How many queued jobs a claim may take instead of its planned one. */
export const ALTERNATES = 3;

export interface AlternatesDeps {
  queue: JobQueue;
  /** Could this agent run this job (labels, and a scaler agent's own fit)? */
  canRun(agent: ConnectedAgent, job: QueuedJob): boolean;
}

/**
 * In a cluster every instance holds every queued job, and those with idle agents reach for the
 * head of the same queue. A claim therefore carries, after its planned job, the next few of the
 * group that its agent could run, and the store gives the agent the first still queued. Those
 * alternates are off this instance's queue while the claim is in flight, so no other claim here
 * offers them; once it is settled, those not taken go back to their places.
 */
export class ClaimAlternates {
  private readonly held = new Set<string>();

  constructor(private readonly deps: AlternatesDeps) {}

  /** Reserved for a claim in flight: neither queued nor active here. */
  has(jobId: string): boolean {
    return this.held.has(jobId);
  }

  /** For each pair, up to ALTERNATES queued jobs of its group that its agent could run, taken off the queue. */
  reserve(pairs: readonly Taken[]): QueuedJob[][] {
    return pairs.map(({ job, agent }) => {
      const alts = this.deps.queue
        .nextOf(job, ALTERNATES * 2)
        .filter((j) => this.deps.canRun(agent, j))
        .slice(0, ALTERNATES);
      for (const j of alts) {
        this.deps.queue.remove(j.id);
        this.held.add(j.id);
      }
      return alts;
    });
  }

  /** The claim statement's rows for these pairs and their alternates. */
  static requests(pairs: readonly Taken[], alts: readonly QueuedJob[][]): ClaimRequest[] {
    return pairs.map((p, i) => ({
      jobId: p.job.id,
      agentId: p.agent.id,
      ...(alts[i]?.length ? { alts: alts[i].map((j) => j.id) } : {}),
    }));
  }

  /**
   * The statement committed (`won`: job → spec). A pair that won an alternate instead of its planned
   * job now holds that one (the planned job is a peer's: it is dropped, as a lost claim's is); the
   * alternates not taken go back to the queue.
   */
  settle(pairs: readonly Taken[], alts: readonly QueuedJob[][], won: ReadonlyMap<string, unknown>): Taken[] {
    const back: QueuedJob[] = [];
    const out = pairs.map((p, i) => {
      const mine = alts[i] ?? [];
      const alt = won.has(p.job.id) ? undefined : mine.find((j) => won.has(j.id));
      for (const j of mine) {
        this.held.delete(j.id);
        if (j !== alt) back.push(j);
      }
      if (!alt) return p;
      p.agent.takeInstead(p.job.id, alt.id);
      return { job: alt, agent: p.agent };
    });
    this.deps.queue.addMany(back); // a job already queued again (a re-read) is not added twice
    return out;
  }

  /** The statement's outcome is unknown: each alternate may have been taken; `uncertain` settles it. */
  unsettled(
    pairs: readonly Taken[],
    alts: readonly QueuedJob[][],
    uncertain: (job: QueuedJob, agentId: string) => void,
  ): void {
    pairs.forEach((p, i) => {
      for (const j of alts[i] ?? []) {
        this.held.delete(j.id);
        uncertain(j, p.agent.id);
      }
    });
  }
}
