/**
 * The raw costs the hot path is judged against, measured in the same run as the burst:
 *
 * - PGlite's own CPU for one job's group commit (its step row, its result with the folded
 *   "running" mark, and the next job's claim: the statements `commitAsPipeline` sends), with
 *   nothing of the orchestrator around it. Back to back (caches warm), with a sleep before each
 *   commit (one wake-up per job, as when agents finish one at a time), and four jobs per wake-up;
 * - the CPU of one bare wake-up of a Node process (a timer that fires and does nothing).
 *
 * On a virtual machine the first work after a sleep runs several times slower than the same work
 * back to back, so the floor of a job is set by how many jobs share a wake-up.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql, type Kysely } from 'kysely';

export interface Floor {
  warmMs: number;
  coldMs: number;
  cold4Ms: number;
  wakeupMs: number;
  gapMs: number;
}

const cpuMs = (c: NodeJS.CpuUsage) => (c.user + c.system) / 1000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** CPU of one wake-up of this process: a timer every `gapMs` that does nothing. */
async function wakeupCost(gapMs: number, n: number): Promise<number> {
  const c0 = process.cpuUsage();
  for (let i = 0; i < n; i++) await sleep(gapMs);
  return cpuMs(process.cpuUsage(c0)) / n;
}

type Db = Kysely<Record<string, Record<string, unknown>>>;
type Commit = (db: Db, batch: unknown, claims?: unknown) => Promise<unknown>;

/** One batch as the group commit builds it for these finished one-step jobs (none: an empty batch). */
function batchFor(jobIds: string[], at: Date) {
  return {
    running: new Map(
      jobIds.map((jobId) => [`${jobId}\u0000a`, { jobId, agentId: 'a', at, due: 0, waiters: [] }]),
    ),
    steps: new Map(
      jobIds.map((jobId) => [
        `${jobId}\u00000`,
        {
          jobId,
          idx: 0,
          start: { name: 'only', at },
          end: { exitCode: 0, timedOut: false, at },
          due: 0,
          waiters: [],
        },
      ]),
    ),
    finishes: new Map(
      jobIds.map((jobId) => [
        jobId,
        { jobId, state: 'succeeded', fields: { exitCode: 0, reason: null }, at, waiters: [] },
      ]),
    ),
    noops: [],
  };
}

/** `root`: the build to measure (its dist/). */
export async function pgliteFloor(root: string, gapMs = 5): Promise<Floor> {
  const { openDatabase } = (await import(join(root, 'dist/store/open.js'))) as {
    openDatabase(o: { dataDir: string }): Promise<{ db: Db; close(): Promise<void> }>;
  };
  const { commitAsPipeline } = (await import(join(root, 'dist/store/group-commit-pipeline.js'))) as {
    commitAsPipeline: Commit;
  };
  const dir = await mkdtemp(join(tmpdir(), 'kici-floor-'));
  const { db, close } = await openDatabase({ dataDir: dir });
  try {
    const total = 2400;
    await sql`insert into runs (id) values ('floor')`.execute(db);
    const spec = JSON.stringify({ steps: [{ name: 'only', run: 'true' }], env: {} });
    for (let i = 0; i < total; i += 100)
      await db
        .insertInto('jobs')
        .values(
          Array.from({ length: 100 }, (_, k) => ({
            id: `f${i + k}`,
            run_id: 'floor',
            name: 'f',
            state: 'queued',
            runs_on: JSON.stringify(['linux']),
            spec,
          })),
        )
        .execute();
    let next = 0;
    const claim = (n: number) => ({
      jobId: Array.from({ length: n }, (_, k) => `f${next + k}`),
      agentId: Array.from({ length: n }, () => 'a'),
      at: new Date().toISOString(),
      owner: null,
    });
    // The first job is claimed alone; then k jobs per commit: the results of jobs next..next+k-1,
    // and the claims of the k after them.
    await commitAsPipeline(db, batchFor([], new Date()), claim(1));
    const round = async (k: number) => {
      const b = batchFor(
        Array.from({ length: k }, (_, j) => `f${next + j}`),
        new Date(),
      );
      next += k;
      await commitAsPipeline(db, b, claim(k));
    };
    const measure = async (jobs: number, k: number, gap: number) => {
      const c0 = process.cpuUsage();
      for (let i = 0; i < jobs; i += k) {
        await round(k);
        if (gap) await sleep(gap);
      }
      return cpuMs(process.cpuUsage(c0)) / jobs;
    };
    await measure(300, 1, 0); // the database's code tiers up, as in a server that has run a while
    const warmMs = await measure(600, 1, 0);
    const coldMs = await measure(400, 1, gapMs);
    const cold4Ms = await measure(800, 4, gapMs);
    const wakeupMs = await wakeupCost(gapMs, 200);
    return { warmMs, coldMs, cold4Ms, wakeupMs, gapMs };
  } finally {
    await close();
    await rm(dir, { recursive: true, force: true });
  }
}
