import type { Command } from 'commander';
import { readRunFile } from '../../jobs/run-file.js';
import { age, printJson, table } from '../output.js';
import type { AdminClient } from './client.js';
import { type ClientOptions } from './client.js';

interface JobView {
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

const FINAL = new Set(['succeeded', 'failed', 'cancelled', 'timed-out', 'no-backend']);

export function registerJobCommands(program: Command, client: (c: Command) => Promise<AdminClient>): void {
  const job = program.command('job').description('submit and inspect jobs');

  job
    .command('submit <file>')
    .description('submit a run file (YAML or JSON); prints the job ids')
    .option('--wait', 'follow progress until every job is final; exit 1 if any did not succeed')
    .option('--json', 'machine-readable output')
    .action(async (file: string, o: { wait?: boolean; json?: boolean }, cmd: Command) => {
      const spec = await readRunFile(file);
      const api = await client(cmd);
      const res = await api.request<{ runId: string; jobs: { id: string; name: string }[] }>(
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
      if (!o.json) process.stdout.write(`run ${res.runId}: ${res.jobs.length} job(s) submitted\n`);
      const final = await waitForRun(
        api,
        res.runId,
        o.json ? undefined : (l) => process.stdout.write(l + '\n'),
      );
      if (o.json) printJson({ runId: res.runId, jobs: final });
      else
        process.stdout.write(
          table(
            ['JOB', 'NAME', 'STATE', 'EXIT', 'REASON'],
            final.map((j) => [j.id, j.name, j.state, j.exitCode, j.reason]),
          ) + '\n',
        );
      if (final.some((j) => j.state !== 'succeeded')) process.exitCode = 1;
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
    .description('show one job')
    .option('--json', 'machine-readable output')
    .action(async (id: string, o: { json?: boolean }, cmd: Command) => {
      const j = await (
        await client(cmd)
      ).request<JobView & { steps: unknown[] }>('GET', `/api/v1/jobs/${encodeURIComponent(id)}`);
      if (o.json) return printJson(j);
      for (const [k, v] of Object.entries(j))
        if (k !== 'steps') process.stdout.write(`${k.padEnd(22)} ${v ?? '-'}\n`);
    });

  job
    .command('logs <id>')
    .description("print a job's log")
    .option('--follow', 'keep printing until the job is final')
    .option('--json', 'machine-readable output')
    .action(async (id: string, o: { follow?: boolean; json?: boolean }, cmd: Command) => {
      const api = await client(cmd);
      let after: number | undefined;
      for (;;) {
        const res = await api.request<{
          state: string;
          lines: { id: number; stream: string; line: string }[];
        }>(
          'GET',
          `/api/v1/jobs/${encodeURIComponent(id)}/logs${after !== undefined ? `?after=${after}` : ''}`,
        );
        for (const l of res.lines) {
          if (o.json) process.stdout.write(JSON.stringify(l) + '\n');
          else process.stdout.write(`${l.stream === 'system' ? '» ' : ''}${l.line}\n`);
          after = l.id;
        }
        if (!o.follow || FINAL.has(res.state)) break;
        await new Promise((r) => setTimeout(r, 500));
      }
    });

  job
    .command('cancel <id>')
    .description('cancel a queued or running job')
    .option('--json', 'machine-readable output')
    .action(async (id: string, o: { json?: boolean }, cmd: Command) => {
      const res = await (
        await client(cmd)
      ).request<{ id: string; state: string }>('POST', `/api/v1/jobs/${encodeURIComponent(id)}/cancel`);
      if (o.json) printJson(res);
      else process.stdout.write(`job ${res.id} cancelled\n`);
    });
}

/** Poll a run until every job is final, reporting each change of the counts. */
export async function waitForRun(
  api: AdminClient,
  runId: string,
  onProgress?: (line: string) => void,
): Promise<JobView[]> {
  let last = '';
  for (;;) {
    const run = await api.request<{ counts: Record<string, number>; jobs: JobView[] }>(
      'GET',
      `/api/v1/runs/${runId}`,
    );
    const line = Object.entries(run.counts)
      .map(([k, v]) => `${k}=${v}`)
      .join(' ');
    if (line !== last) onProgress?.(`  ${line}`);
    last = line;
    if (run.jobs.every((j) => FINAL.has(j.state))) return run.jobs;
    await new Promise((r) => setTimeout(r, 300));
  }
}

export type { ClientOptions };
