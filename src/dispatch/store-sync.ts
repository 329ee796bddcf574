import type { JobSpec } from '../jobs/run-spec.js';
import { secretValues } from '../jobs/secret-mask.js';
import type { JobRow, Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import type { Logger } from '../util/logger.js';
import type { ActiveJob, JobObserver } from './active-job.js';
import type { ActiveJobs } from './active-jobs.js';
import type { Claims } from './claims.js';
import type { JobQueue, QueuedJob } from './job-queue.js';
import { toQueued, type ResyncHint } from './job-rows.js';
import type { LogSink } from './log-sink.js';
import { sealedHolder, type SealedEnv } from './sealed-env.js';

/** Rows per read when a start-up or a wake-up pages through the queue. */
const RECOVER_PAGE = 5_000;
const RESYNC_PAGE = 5_000;

export interface StoreSyncDeps {
  store: Store;
  clock: Clock;
  log: Logger;
  queue: JobQueue;
  active: ActiveJobs;
  logs: LogSink;
  sealed: SealedEnv;
  claims: Claims;
  observer?: JobObserver | undefined;
  /** Several orchestrators on one database: this instance's id (see DispatcherOptions). */
  instanceId?: string | undefined;
  peerAlive?: ((instanceId: string) => Promise<boolean>) | undefined;
  /** Reads the static tokens again: their labels' jobs wait for an agent rather than fail. */
  refreshStaticScopes(): Promise<void>;
  /** Ask for a dispatch pass (rows were added to the queue). */
  pump(): void;
}

/**
 * What this instance holds of the store's open jobs, read back from the store: every open job at
 * start-up (`recover`), and on a wake-up the queued rows it does not hold yet (`resync`). The
 * dispatcher keeps the hot path; this keeps the place in the queue the last read reached.
 */
export class StoreSync {
  /** The highest place in the queue (seq) read from the store: a hinted re-read starts after it. */
  private seenSeq = 0;

  constructor(private readonly d: StoreSyncDeps) {}

  /**
   * Open jobs from the store after a start: queued ones queue again, active ones await their agent.
   * The queue is read a page at a time, so a million queued jobs never sit in memory as rows at once.
   */
  async recover(): Promise<{ queued: number; awaiting: number }> {
    const d = this.d;
    await d.refreshStaticScopes();
    let queued = 0;
    let awaiting = 0;
    for (let after = 0; ;) {
      const page = await d.store.jobs.listQueuedPage(after, RECOVER_PAGE);
      const toQueue: QueuedJob[] = [];
      for (const row of page) {
        this.seen(row);
        if (!d.sealed.canDispatch(row.id, row.spec)) {
          if (!d.instanceId) await this.settleUnsealable(row.id);
          continue;
        }
        toQueue.push(toQueued(row));
      }
      d.queue.addMany(toQueue);
      queued += toQueue.length;
      if (page.length < RECOVER_PAGE) break;
      after = Number(page.at(-1)!.seq);
    }
    for (const row of await d.store.jobs.listActive()) {
      if (!row.agent_id || !this.owns(row)) continue;
      const a: ActiveJob = {
        job: toQueued(row),
        spec: row.spec as JobSpec,
        agentId: row.agent_id,
        state: row.state === 'running' ? 'running' : 'dispatched',
      };
      d.active.track(a);
      d.logs.protect(a.job.id, secretValues(a.spec));
      d.active.armTimeout(a);
      d.active.orphan(a, 'orchestrator restarted');
      awaiting++;
    }
    return { queued, awaiting };
  }

  /**
   * Queued rows this process does not hold: jobs submitted to (or requeued by) another
   * orchestrator on the same database, or a run whose insert committed while its answer was lost
   * to a broken connection. A job held by several instances is harmless: every claim is conditional.
   *
   * Without a hint, a full re-read: every queued job's id (not its spec), and the whole rows of
   * those not held here. With one, only what the hint names: rows queued from a place in the queue
   * on (a submit's first job) or after the last one seen, and jobs named by id (a requeue keeps its
   * old place). A wake-up with a million jobs queued then costs the new rows, not the million.
   */
  async resync(hint?: ResyncHint): Promise<number> {
    const d = this.d;
    // Tokens made on another instance give their labels' jobs a reason to wait here too. A hinted
    // re-read (a peer's submit) leaves that to the poll's catch-up and to the dispatch pass, which
    // reads them again before it judges a job "no backend".
    if (!hint) await d.refreshStaticScopes();
    const rows = hint ? await this.hinted(hint) : await this.everything();
    const toQueue: QueuedJob[] = [];
    for (const row of rows) {
      this.seen(row);
      if (this.holds(row.id)) continue;
      // Its sealed values are in the memory of the instance that submitted it: that one dispatches it.
      if (!d.sealed.canDispatch(row.id, row.spec)) {
        await this.settleIfHolderGone(row);
        continue;
      }
      if (d.claims.isPending(row.id)) continue;
      toQueue.push(toQueued(row));
    }
    // Not held until added (the awaits above), so nothing was taken meanwhile that this would undo:
    // a job another instance claimed since is refused by its conditional claim.
    const before = d.queue.size;
    d.queue.addMany(toQueue.filter((j) => !this.holds(j.id)));
    const added = d.queue.size - before;
    if (added) {
      d.log.debug({ added }, 'queued jobs taken from the store');
      d.pump();
    }
    return added;
  }

  private async everything(): Promise<JobRow[]> {
    const jobs = this.d.store.jobs;
    const all = await jobs.listQueuedIds();
    if (all.length) this.seenSeq = Math.max(this.seenSeq, all.at(-1)!.seq);
    return jobs.listQueuedByIds(all.filter((r) => !this.holds(r.id)).map((r) => r.id));
  }

  private async hinted(hint: ResyncHint): Promise<JobRow[]> {
    const jobs = this.d.store.jobs;
    const rows: JobRow[] = [];
    const from = Math.min(hint.fromSeq ?? Infinity, this.seenSeq + 1);
    for (let after = from - 1; ;) {
      const page = await jobs.listQueuedPage(after, RESYNC_PAGE);
      // Held rows count as seen too (this instance's own submits): the next read starts after them.
      if (page.length) this.seen(page.at(-1)!);
      rows.push(...page.filter((r) => !this.holds(r.id)));
      if (page.length < RESYNC_PAGE) break;
      after = Number(page.at(-1)!.seq);
    }
    if (hint.ids?.length)
      rows.push(...(await jobs.listQueuedByIds(hint.ids.filter((id) => !this.holds(id)))));
    return rows.sort((a, b) => Number(a.seq) - Number(b.seq));
  }

  private seen(row: Pick<JobRow, 'seq'>): void {
    this.seenSeq = Math.max(this.seenSeq, Number(row.seq));
  }

  private holds(jobId: string): boolean {
    return !!this.d.queue.get(jobId) || this.d.active.has(jobId);
  }

  /**
   * A queued job whose sealed values died with the process that held them can never be handed out
   * whole. Alone on its store, this instance knows no one else holds them: the job fails, and the
   * scaler provisions again if the work is still wanted.
   */
  private async settleUnsealable(jobId: string): Promise<void> {
    const d = this.d;
    const reason =
      'its claim code was held only in the memory of an orchestrator that stopped before dispatching it; the scaler provisions again if still needed';
    const now = new Date(d.clock.now());
    if (await d.store.jobs.finish(jobId, 'failed', { reason, fromState: 'queued' }, now))
      d.observer?.jobFinished(jobId, 'failed', d.clock.now());
    d.log.warn({ jobId }, 'a provisioning job lost its sealed values in a restart; failed');
  }

  /**
   * A queued sealed job held by a peer that is no longer alive: the values died with it, so the job
   * fails as it would on that peer's own restart (one instance wins the conditional finish).
   */
  private async settleIfHolderGone(row: JobRow): Promise<void> {
    const holder = sealedHolder(row.spec);
    const d = this.d;
    if (!holder || holder === d.instanceId || !d.peerAlive) return;
    if (await d.peerAlive(holder).catch(() => true)) return;
    await this.settleUnsealable(row.id);
  }

  /** In a cluster, an active job is this instance's only if it dispatched it (or no one is named). */
  private owns(row: JobRow): boolean {
    const owner = row.owner_instance;
    return !this.d.instanceId || !owner || owner === this.d.instanceId;
  }
}
