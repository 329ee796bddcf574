import type { JobSpec } from '../jobs/run-spec.js';

/**
 * What a queued job needs in memory: the facts routing, agent fit and caps read. Steps and env stay
 * in the store and come back with the claim, so 100,000 queued jobs do not hold 100,000 scripts.
 */
export type QueuedJobSpec = Pick<JobSpec, 'role'> & Partial<Omit<JobSpec, 'role'>>;

export function routingSpec(spec: JobSpec | QueuedJobSpec): QueuedJobSpec {
  return {
    role: spec.role,
    ...(spec.excludeLabels ? { excludeLabels: spec.excludeLabels } : {}),
    ...(spec.resources ? { resources: spec.resources } : {}),
    ...(spec.container ? { container: spec.container } : {}),
  };
}

export interface QueuedJob {
  id: string;
  runId: string;
  name: string;
  seq: number;
  runsOn: string[];
  spec: QueuedJobSpec;
  createdAtMs: number;
  /** Why the job is still waiting, as last decided; shown by `job list` and `scaler explain`. */
  waiting?: string;
}

interface Group {
  key: string;
  labels: string[];
  spec: QueuedJobSpec;
  jobs: Map<string, QueuedJob>;
  /** The highest-seq job added, to tell an append from a re-insert without scanning. */
  last?: QueuedJob;
}

/**
 * Queued jobs in memory, grouped by their runsOn label set so a dispatch pass decides once per
 * group instead of once per job. Within a group jobs stay in submission (seq) order.
 */
export class JobQueue {
  private readonly groups = new Map<string, Group>();
  /** Job id → the group holding it (the job itself is found in the group, so no wrapper per job). */
  private readonly byId = new Map<string, Group>();

  get size(): number {
    return this.byId.size;
  }

  has(id: string): boolean {
    return this.byId.has(id);
  }

  get(id: string): QueuedJob | undefined {
    return this.byId.get(id)?.jobs.get(id);
  }

  add(job: QueuedJob): void {
    if (this.byId.has(job.id)) return;
    const key = groupKey(job);
    let g = this.groups.get(key);
    if (!g) {
      g = { key, labels: job.runsOn, spec: routingSpec(job.spec), jobs: new Map() };
      this.groups.set(key, g);
    }
    // Every job of a group has the same labels and routing facts (they make the key): share them.
    job.runsOn = g.labels;
    job.spec = g.spec;
    const last = g.last;
    if (last && last.seq > job.seq) {
      // A requeued job goes back to its place, not to the end.
      // A new map, not clear() + refill: a live jobs() iterator would otherwise start over, forever.
      const all = [...g.jobs.values(), job].sort((a, b) => a.seq - b.seq);
      g.jobs = new Map(all.map((j) => [j.id, j]));
    } else {
      g.jobs.set(job.id, job);
      g.last = job;
    }
    this.byId.set(job.id, g);
  }

  remove(id: string): QueuedJob | undefined {
    const group = this.byId.get(id);
    const job = group?.jobs.get(id);
    if (!group || !job) return undefined;
    this.byId.delete(id);
    group.jobs.delete(id);
    if (group.jobs.size === 0) this.groups.delete(group.key);
    return job;
  }

  /** Groups ordered by their oldest job, so the longest-waiting work is considered first. */
  orderedGroups(): {
    key: string;
    labels: string[];
    size: number;
    first: QueuedJob;
    jobs: () => Iterable<QueuedJob>;
  }[] {
    const out = [...this.groups.values()].map((g) => ({
      key: g.key,
      labels: g.labels,
      size: g.jobs.size,
      first: g.jobs.values().next().value as QueuedJob,
      jobs: () => g.jobs.values(),
    }));
    out.sort((a, b) => a.first.seq - b.first.seq);
    return out;
  }

  all(): QueuedJob[] {
    return [...this.groups.values()].flatMap((g) => [...g.jobs.values()]);
  }
}

function groupKey(job: QueuedJob): string {
  const role = job.spec.role ?? 'execution';
  const image = job.spec.container?.image ?? '';
  const exclude = [...new Set((job.spec.excludeLabels ?? []).map((l) => l.trim().toLowerCase()))].sort();
  // Jobs of one group must be interchangeable for routing, agent fit and caps, so everything that
  // decides those is in the key. JSON, not a joined string: a label may itself contain ',' or '|'.
  return JSON.stringify([job.runsOn, role, image, exclude, job.spec.resources ?? null]);
}
