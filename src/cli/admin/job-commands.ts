import type { Command } from 'commander';
import { checkRunFile, readRunFile, summarizeRun } from '../../jobs/run-file.js';
import { UsageError } from '../../util/errors.js';
import { age, printJson, table } from '../output.js';
import type { AdminClient } from './client.js';
import { type ClientOptions } from './client.js';
import { renderJobDetail, type JobDetail } from './job-get.js';
import { BatchedLines, JobLogReader, sleep } from './job-logs.js';
import { waitForRun, type RunJobView } from './job-wait.js';

type JobView = RunJobView;
type Client = (c: Command) => Promise<AdminClient>;
const enc = encodeURIComponent;

function parseTimeout(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0)
    throw new UsageError(`--timeout: a number of seconds greater than 0, got ${JSON.stringify(raw)}`);
  return n * 1000;
}

function jobStateTable(jobs: JobView[]): string {
  return table(
    ['JOB', 'NAME', 'STATE', 'EXIT', 'REASON'],
    jobs.map((j) => [j.id, j.name, j.state, j.exitCode, j.reason ?? j.waiting]),
  );
}

interface SubmitOptions {
  wait?: boolean;
  timeout?: string;
  follow?: boolean;
  timestamps?: boolean;
  json?: boolean;
}

async function submit(file: string, o: SubmitOptions, api: () => Promise<AdminClient>): Promise<void> {
  if ((o.timeout !== undefined || o.follow) && !o.wait)
    throw new UsageError('--timeout and --follow only apply with --wait');
  if (o.timestamps && !o.follow) throw new UsageError('--timestamps only applies with --follow');
  const timeoutMs = parseTimeout(o.timeout);
  const spec = await readRunFile(file);
  const client = await api();
  const res = await client.request<{ runId: string; jobs: { id: string; name: string }[] }>(
    'POST',
    '/api/v1/runs',
    spec,
  );
  if (!o.wait) {
    if (o.json) printJson(res);
    else
      process.stdout.write(
        `run ${res.runId}\n${table(
          ['JOB', 'NAME'],
          res.jobs.map((j) => [j.id, j.name]),
        )}\n`,
      );
    return;
  }
  const ndjson = (record: unknown) => process.stdout.write(JSON.stringify(record) + '\n');
  if (!o.json) process.stdout.write(`run ${res.runId}: ${res.jobs.length} job(s) submitted\n`);
  const result = await waitForRun(client, res.runId, {
    ...(timeoutMs !== undefined && { timeoutMs }),
    ...(!o.json && { onProgress: (l: string) => process.stdout.write(l + '\n') }),
    ...(o.follow && {
      follow: o.json
        ? { json: ndjson }
        : { text: (l: string) => process.stdout.write(l + '\n'), ...(o.timestamps && { timestamps: true }) },
    }),
  });
  const body = { runId: res.runId, timedOut: result.timedOut, jobs: result.jobs };
  // With --follow --json every record is one line, so the stream stays NDJSON to the end.
  if (o.json) {
    if (o.follow) ndjson({ type: 'result', ...body });
    else printJson(body);
  } else process.stdout.write(jobStateTable(result.jobs) + '\n');
  if (result.timedOut) {
    // With --json the body's `timedOut` says it; stderr stays free of text.
    if (!o.json)
      process.stderr.write(
        `Error: run ${res.runId} was not finished after ${o.timeout}s (--timeout); its jobs keep running (see the states above)\n`,
      );
    process.exitCode = 1;
  } else if (result.jobs.some((j) => j.state !== 'succeeded')) process.exitCode = 1;
}

export function registerJobCommands(program: Command, client: Client): void {
  const job = program.command('job').description('submit and inspect jobs');

  job
    .command('submit <file>')
    .description('submit a run file (YAML or JSON); prints the job ids')
    .option('--wait', 'follow progress until every job is final; exit 1 if any did not succeed')
    .option(
      '--timeout <seconds>',
      'with --wait: stop waiting after this long (exit 1; the jobs keep running)',
    )
    .option('--follow', "with --wait: stream the jobs' logs, each line prefixed with the job name")
    .option('--timestamps', 'with --follow: prefix every log line with its ISO time')
    .option('--json', 'machine-readable output (with --follow: one JSON record per line)')
    .action(async (file: string, o: SubmitOptions, cmd: Command) => submit(file, o, () => client(cmd)));

  job
    .command('validate <file>')
    .description('check a run file offline (no server); lists every problem')
    .option('--json', 'machine-readable output')
    .action(async (file: string, o: { json?: boolean }) => {
      if (!file) throw new UsageError('<file>: the path of a run file (YAML or JSON)');
      const res = await checkRunFile(file);
      if (o.json) {
        printJson(
          res.ok
            ? { ok: true, file, ...summarizeRun(res.spec) }
            : { ok: false, file, problems: res.problems },
        );
      } else if (res.ok) {
        const s = summarizeRun(res.spec);
        process.stdout.write(
          `${file}: valid: ${s.jobs} job${s.jobs === 1 ? '' : 's'}, ${s.steps} step${s.steps === 1 ? '' : 's'}\n`,
        );
      } else {
        const n = res.problems.length;
        process.stdout.write(`${file}: invalid, ${n} problem${n === 1 ? '' : 's'}:\n`);
        for (const p of res.problems) process.stdout.write(`  ${p}\n`);
      }
      process.exitCode = res.ok ? 0 : 1;
    });

  job
    .command('list')
    .description('list recent jobs')
    .option('--state <state>', 'only jobs in this state')
    .option('--run <runId>', 'only jobs of this run')
    .option('--limit <n>', 'how many', '50')
    .option('--json', 'machine-readable output')
    .action(async (o: { state?: string; run?: string; limit: string; json?: boolean }, cmd: Command) => {
      const q = new URLSearchParams({ limit: o.limit });
      if (o.state) q.set('state', o.state);
      if (o.run) q.set('runId', o.run);
      const res = await (await client(cmd)).request<{ jobs: JobView[] }>('GET', `/api/v1/jobs?${q}`);
      if (o.json) return printJson(res.jobs);
      process.stdout.write(
        table(
          ['JOB', 'RUN', 'NAME', 'STATE', 'AGENT', 'EXIT', 'AGE', 'NOTE'],
          res.jobs.map((j) => [
            j.id,
            j.runId,
            j.name,
            j.state,
            j.agentId,
            j.exitCode,
            age(j.createdAt),
            j.reason ?? j.waiting,
          ]),
        ) + '\n',
      );
    });

  job
    .command('get <id>')
    .description('show one job: its fields, the reason, and each step (exit code, duration)')
    .option('--json', 'machine-readable output')
    .action(async (id: string, o: { json?: boolean }, cmd: Command) => {
      const j = await (await client(cmd)).request<JobDetail>('GET', `/api/v1/jobs/${enc(id)}`);
      if (o.json) return printJson(j);
      process.stdout.write(renderJobDetail(j));
    });

  job
    .command('logs <id>')
    .description("print a job's log, each step framed by its name, exit code and duration")
    .option('--follow', 'keep printing until the job is final')
    .option('--timestamps', 'prefix every line with its ISO time')
    .option('--json', 'machine-readable output (with --follow: one JSON record per line)')
    .action(
      async (id: string, o: { follow?: boolean; timestamps?: boolean; json?: boolean }, cmd: Command) => {
        const api = await client(cmd);
        const all: unknown[] = [];
        const ndjson = (r: unknown) => process.stdout.write(JSON.stringify(r) + '\n');
        const text = new BatchedLines((chunk) => process.stdout.write(chunk));
        const reader = new JobLogReader(
          api,
          id,
          o.json
            ? {
                json: (lines) =>
                  o.follow ? (lines as unknown[]).forEach(ndjson) : all.push(...(lines as unknown[])),
              }
            : { text: (l) => text.add(l) },
          o.timestamps ? { timestamps: true } : {},
        );
        for (;;) {
          const r = await reader.poll();
          text.flush();
          if (!o.follow || r.done) {
            if (o.json && !o.follow)
              printJson({
                jobId: id,
                state: r.state,
                logTruncated: r.logTruncated,
                steps: r.steps,
                lines: all,
              });
            else if (o.json) ndjson({ type: 'end', jobId: id, state: r.state, steps: r.steps });
            return;
          }
          await sleep(500);
        }
      },
    );

  job
    .command('retry <id>')
    .description('run a finished job again as a new attempt in the same run; prints the new job id')
    .option('--json', 'machine-readable output')
    .action(async (id: string, o: { json?: boolean }, cmd: Command) => {
      const res = await (
        await client(cmd)
      ).request<JobView & { attempt: number; retryOf: string }>('POST', `/api/v1/jobs/${enc(id)}/retry`);
      if (o.json) printJson(res);
      else process.stdout.write(`${res.id}\n`);
    });

  job
    .command('cancel <id>')
    .description('cancel a queued or running job')
    .option('--json', 'machine-readable output')
    .action(async (id: string, o: { json?: boolean }, cmd: Command) => {
      const res = await (
        await client(cmd)
      ).request<{ id: string; state: string; cancelRequested?: boolean }>(
        'POST',
        `/api/v1/jobs/${enc(id)}/cancel`,
      );
      if (o.json) printJson(res);
      else if (res.cancelRequested)
        process.stdout.write(`job ${res.id}: cancel sent to the orchestrator instance that runs it\n`);
      else process.stdout.write(`job ${res.id} cancelled\n`);
    });
}

export { waitForRun };
export type { ClientOptions };
