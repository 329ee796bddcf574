import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AgentMessage, AssignedJob, JobResult, LogStream } from '../protocol/messages.js';
import { runStep, type RunningStep } from './step-runner.js';

/** Variables the agent itself holds that build steps must never see. */
const PRIVATE_ENV = ['KICI_AGENT_TOKEN', 'KICI_SCALER_CLAIM_CODE', 'KICI_ADMIN_TOKEN'];

export interface JobRunnerOptions {
  job: AssignedJob;
  send: (msg: AgentMessage) => void;
  workDir?: string | undefined;
  keepWorkspace?: boolean;
  baseEnv?: NodeJS.ProcessEnv;
}

/** Runs one job's steps in order and reports everything through `send`. */
export class JobRunner {
  private current: RunningStep | undefined;
  private stopped: 'cancel' | 'timeout' | undefined;
  private pending: { idx: number | null; stream: LogStream; lines: string[] } | undefined;
  private flushTimer: NodeJS.Timeout | undefined;

  constructor(private readonly opts: JobRunnerOptions) {}

  get jobId(): string {
    return this.opts.job.id;
  }

  cancel(kind: 'cancel' | 'timeout' = 'cancel'): void {
    if (this.stopped) return;
    this.stopped = kind;
    this.current?.cancel(kind);
  }

  async run(): Promise<JobResult> {
    const { job, send } = this.opts;
    send({ type: 'job.started', jobId: job.id });
    const jobTimer = job.timeoutSeconds
      ? setTimeout(() => this.cancel('timeout'), job.timeoutSeconds * 1000)
      : undefined;
    const workspace = await mkdtemp(join(this.opts.workDir ?? tmpdir(), `kici-${job.id}-`));
    let result: JobResult = 'succeeded';
    let exitCode: number | null = 0;
    let message: string | undefined;
    try {
      if (job.container) {
        result = 'failed';
        exitCode = null;
        message = `job asks for container image "${job.container.image}", but this agent runs steps on its host; route it to an agent with kici:runtime:docker or kici:runtime:podman`;
        this.line(null, 'system', message);
      }
      for (let idx = 0; idx < job.steps.length && result === 'succeeded'; idx++) {
        if (this.stopped) break;
        const step = job.steps[idx]!;
        send({ type: 'step.started', jobId: job.id, idx, name: step.name });
        const started = Date.now();
        this.current = runStep({
          script: step.run,
          cwd: workspace,
          env: this.stepEnv(step.env),
          timeoutMs: step.timeoutSeconds ? step.timeoutSeconds * 1000 : undefined,
          onLine: (stream, line) => this.line(idx, stream, line),
        });
        const out = await this.current.done;
        this.current = undefined;
        if (out.error) this.line(idx, 'system', `step could not start: ${out.error}`);
        if (out.timedOut) this.line(idx, 'system', `step timed out after ${step.timeoutSeconds}s`);
        this.flush();
        send({
          type: 'step.finished',
          jobId: job.id,
          idx,
          exitCode: out.exitCode,
          timedOut: out.timedOut,
          durationMs: Date.now() - started,
        });
        exitCode = out.exitCode;
        if (out.timedOut) result = 'timed-out';
        else if (out.cancelled || this.stopped === 'cancel') result = 'cancelled';
        else if (this.stopped === 'timeout') result = 'timed-out';
        else if (out.exitCode !== 0) result = 'failed';
      }
      if (result === 'succeeded' && this.stopped)
        result = this.stopped === 'timeout' ? 'timed-out' : 'cancelled';
      if (result === 'timed-out' && this.stopped === 'timeout' && job.timeoutSeconds) {
        message = `job timed out after ${job.timeoutSeconds}s`;
        this.line(null, 'system', message);
      }
    } finally {
      if (jobTimer) clearTimeout(jobTimer);
      this.flush();
      if (!this.opts.keepWorkspace) await rm(workspace, { recursive: true, force: true }).catch(() => {});
    }
    send({ type: 'job.finished', jobId: job.id, result, exitCode, ...(message ? { message } : {}) });
    return result;
  }

  private stepEnv(stepEnv: Record<string, string> | undefined): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = { ...(this.opts.baseEnv ?? process.env) };
    for (const k of PRIVATE_ENV) delete env[k];
    return {
      ...env,
      CI: 'true',
      KICI: 'true',
      KICI_JOB_ID: this.opts.job.id,
      KICI_RUN_ID: this.opts.job.runId,
      KICI_JOB_NAME: this.opts.job.name,
      ...this.opts.job.env,
      ...stepEnv,
    };
  }

  /** Lines are batched briefly so a chatty step costs one message per burst, not per line. */
  private line(idx: number | null, stream: LogStream, line: string): void {
    const p = this.pending;
    if (p && (p.idx !== idx || p.stream !== stream)) this.flush();
    if (!this.pending) this.pending = { idx, stream, lines: [] };
    this.pending.lines.push(line);
    if (this.pending.lines.length >= 200) this.flush();
    else if (!this.flushTimer) this.flushTimer = setTimeout(() => this.flush(), 25);
  }

  private flush(): void {
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    const p = this.pending;
    this.pending = undefined;
    if (p && p.lines.length) {
      this.opts.send({ type: 'log', jobId: this.opts.job.id, idx: p.idx, stream: p.stream, lines: p.lines });
    }
  }
}
