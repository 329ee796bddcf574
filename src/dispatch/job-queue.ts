import type { JobSpec } from '../jobs/run-spec.js';

export interface QueuedJob {
  id: string;
  runId: string;
  name: string;
  seq: number;
  runsOn: string[];
  spec: JobSpec;
  createdAtMs: number;
  /** Why the job is still waiting, as last decided; shown by `job list` and `scaler explain`. */
  waiting?: string;
}

interface Group {
  key: string;
  labels: string[];
  jobs: Map<string, QueuedJob>;
}

/**
 * Queued jobs in memory, grouped by their runsOn label set so a dispatch pass decides once per
 * group instead of once per job. Within a group jobs stay in submission (seq) order.
 */
export class JobQueue {
  private readonly groups = new Map<string, Group>();
  private readonly byId = new Map<string, { job: QueuedJob; group: Group }>();

  get size(): number {
    return this.byId.size;
  }

  has(id: string): boolean {
    return this.byId.has(id);
  }

  get(id: string): QueuedJob | undefined {
    return this.byId.get(id)?.job;
  }

  add(job: QueuedJob): void {
    if (this.byId.has(job.id)) return;
    const key = groupKey(job);
    let g = this.groups.get(key);
    if (!g) {
      g = { key, labels: job.runsOn, jobs: new Map() };
      this.groups.set(key, g);
    }
    const last = [...g.jobs.values()].at(-1);
    if (last && last.seq > job.seq) {
      // A requeued job goes back to its place, not to the end.
      const all = [...g.jobs.values(), job].sort((a, b) => a.seq - b.seq);
      g.jobs.clear();
      for (const j of all) g.jobs.set(j.id, j);
    } else g.jobs.set(job.id, job);
    this.byId.set(job.id, { job, group: g });
  }

  remove(id: string): QueuedJob | undefined {
    const hit = this.byId.get(id);
    if (!hit) return undefined;
    this.byId.delete(id);
    hit.group.jobs.delete(id);
    if (hit.group.jobs.size === 0) this.groups.delete(hit.group.key);
    return hit.job;
  }

  /** Groups ordered by their oldest job, so the longest-waiting work is considered first. */
  orderedGroups(): { key: string; labels: string[]; jobs: QueuedJob[] }[] {
    const out = [...this.groups.values()].map((g) => ({ key: g.key, labels: g.labels, jobs: [...g.jobs.values()] }));
    out.sort((a, b) => a.jobs[0]!.seq - b.jobs[0]!.seq);
    return out;
  }

  all(): QueuedJob[] {
    return [...this.byId.values()].map((h) => h.job);
  }
}

function groupKey(job: QueuedJob): string {
  const role = job.spec.role ?? 'execution';
  const image = job.spec.container?.image ?? '';
  // JSON, not a joined string: a label may itself contain ',' or '|' (runsOn: "a,b" is one label).
  return JSON.stringify([job.runsOn, role, image]);
}
