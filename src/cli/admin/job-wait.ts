/** `job submit --wait`: poll a run until every job is final, a deadline passes, or both. */
import type { AdminClient } from './client.js';
import { FINAL_STATES, JobLogReader, sleep } from './job-logs.js';

export interface RunJobView {
  id: string;
  runId: string;
  name: string;
  state: string;
  agentId: string | null;
  exitCode: number | null;
  reason: string | null;
  waiting: string | null;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
}

export interface WaitOptions {
  /** Give up after this long (the jobs keep running). */
  timeoutMs?: number;
  onProgress?: (line: string) => void;
  /** Stream every job's log, each line prefixed with the job's name. */
  follow?: { text?: (line: string) => void; json?: (record: unknown) => void; timestamps?: boolean };
}

export type WaitResult = { jobs: RunJobView[]; timedOut: boolean };

export async function waitForRun(
  api: AdminClient,
  runId: string,
  opts: WaitOptions = {},
): Promise<WaitResult> {
  const deadline = opts.timeoutMs === undefined ? Infinity : Date.now() + opts.timeoutMs;
  const readers = new Map<string, JobLogReader>();
  const drained = new Set<string>();
  let last = '';
  for (;;) {
    const run = await api.request<{ counts: Record<string, number>; jobs: RunJobView[] }>(
      'GET',
      `/api/v1/runs/${encodeURIComponent(runId)}`,
    );
    const line = Object.entries(run.counts)
      .map(([k, v]) => `${k}=${v}`)
      .join(' ');
    if (line !== last) opts.onProgress?.(`  ${line}`);
    last = line;
    if (opts.follow) await followRun(api, run.jobs, readers, drained, opts.follow);
    const allFinal = run.jobs.every((j) => FINAL_STATES.has(j.state));
    const logsDone = !opts.follow || run.jobs.every((j) => drained.has(j.id));
    if (allFinal && logsDone) return { jobs: run.jobs, timedOut: false };
    if (Date.now() >= deadline) return { jobs: run.jobs, timedOut: true };
    await sleep(Math.min(300, Math.max(0, deadline - Date.now())));
  }
}

async function followRun(
  api: AdminClient,
  jobs: RunJobView[],
  readers: Map<string, JobLogReader>,
  drained: Set<string>,
  follow: NonNullable<WaitOptions['follow']>,
): Promise<void> {
  const width = Math.max(...jobs.map((j) => j.name.length));
  for (const j of jobs) {
    if (drained.has(j.id) || (j.state === 'queued' && j.startedAt === null && !FINAL_STATES.has(j.state)))
      continue;
    let reader = readers.get(j.id);
    if (!reader) {
      reader = new JobLogReader(
        api,
        j.id,
        {
          ...(follow.text && { text: follow.text }),
          ...(follow.json && {
            json: (lines: unknown) => {
              for (const l of lines as object[])
                follow.json!({ type: 'log', job: j.name, jobId: j.id, ...l });
            },
          }),
        },
        { prefix: `${j.name.padEnd(width)} | `, ...(follow.timestamps && { timestamps: true }) },
      );
      readers.set(j.id, reader);
    }
    if ((await reader.poll()).done) drained.add(j.id);
  }
}
