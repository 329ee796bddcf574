/** `job get` for people: the job's fields, then one row per step. */
import { table } from '../output.js';
import { formatDuration, type StepView } from './job-log-render.js';

export interface JobDetail {
  id: string;
  runId: string;
  name: string;
  state: string;
  runsOn: string[];
  agentId: string | null;
  exitCode: number | null;
  reason: string | null;
  waiting: string | null;
  /** Absent from an older orchestrator's answer. */
  priority?: number;
  owner?: string | null;
  attempt: number;
  retryOf: string | null;
  logTruncated: boolean;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  steps: StepView[];
}

function jobDuration(j: JobDetail): string {
  if (!j.startedAt) return '-';
  const end = j.finishedAt ? new Date(j.finishedAt) : new Date();
  return formatDuration(end.getTime() - new Date(j.startedAt).getTime());
}

export function renderJobDetail(j: JobDetail): string {
  const fields: [string, unknown][] = [
    ['job', j.id],
    ['run', j.runId],
    ['name', j.name],
    ['state', j.state],
    ['attempt', j.retryOf ? `${j.attempt} (retry of ${j.retryOf})` : j.attempt],
    ['runs on', j.runsOn.join(', ')],
    ['priority', j.priority ?? 0],
    ['owner', j.owner ?? null],
    ['agent', j.agentId],
    ['exit code', j.exitCode],
    ['reason', j.reason],
    ...(j.waiting ? ([['waiting', j.waiting]] as [string, unknown][]) : []),
    ['created', j.createdAt],
    ['started', j.startedAt],
    ['finished', j.finishedAt],
    ['duration', jobDuration(j)],
    ...(j.logTruncated ? ([['log', 'truncated (head and tail kept)']] as [string, unknown][]) : []),
  ];
  const head = fields.map(([k, v]) => `${k.padEnd(10)} ${v === null || v === undefined ? '-' : String(v)}`);
  if (!j.steps.length) return `${head.join('\n')}\n\n(no steps ran)\n`;
  const steps = table(
    ['STEP', 'NAME', 'EXIT', 'DURATION', 'RESULT'],
    j.steps.map((s) => [
      s.idx + 1,
      s.name,
      s.exitCode,
      formatDuration(s.durationMs),
      !s.finishedAt
        ? j.finishedAt
          ? 'did not finish'
          : 'running'
        : s.timedOut
          ? 'timed out'
          : s.exitCode === 0
            ? 'ok'
            : 'failed',
    ]),
  );
  return `${head.join('\n')}\n\n${steps}\n`;
}
