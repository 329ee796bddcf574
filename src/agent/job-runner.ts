import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AgentMessage, AssignedJob, JobResult, LogStream } from '../protocol/messages.js';
import { setLongTimeout } from '../util/long-timer.js';
import { stopProcesses } from '../util/proc-tree.js';
import { markCounters, type PidMark } from '../util/pid-window.js';
import { MAX_FRAME_BYTES } from './frames.js';
import { agentOomProbe, oomMessage, type OomProbe } from './oom.js';
import { DeadManSwitch } from './dead-man.js';
import { runStep, type RunningStep } from './step-runner.js';
import type { ReadyShells } from './ready-shells.js';
import { SECRET_ENV } from './token-handoff.js';

/** Set in every step's environment; finds what a job left behind once it ends (docs/step-runner.md). */
export const JOB_MARKER_ENV = 'KICI_JOB_MARKER';

/**
 * A provisioning job's event payload (it holds a claim code) is written here by its first step; it
 * is removed when the job ends, however it ends. Only this exact shape is removed.
 */
const EVENT_PAYLOAD_PATH = /^\/tmp\/kici-event-[0-9a-f-]{36}\.json$/;

/** Room left in a frame for everything but the lines (type, job id, stream, brackets). */
const FRAME_OVERHEAD_BYTES = 1024;
const BATCH_LINES = 200;

export interface JobRunnerOptions {
  job: AssignedJob;
  send: (msg: AgentMessage) => void;
  /**
   * Lets the frames sent so far leave now rather than at the end of the turn (coalesce-writes.ts):
   * called once a step's start is sent, when its shell is about to be spawned.
   */
  flush?: (() => void) | undefined;
  workDir?: string | undefined;
  keepWorkspace?: boolean;
  baseEnv?: NodeJS.ProcessEnv;
  /** Grace between SIGTERM and SIGKILL for what the job left running when it ends. */
  reapGraceMs?: number;
  /** True while sent messages pile up unsent; output is then not read, so a flood cannot fill memory. */
  congested?: () => boolean;
  /** Where OOM kills are counted (default: this process's own memory cgroup). */
  oom?: OomProbe | undefined;
  /**
   * The agent's long-lived dead-man switch (dead-man.ts); without one the job starts its own, as a
   * job run outside an agent does.
   */
  deadMan?: DeadManSwitch | undefined;
  /** The agent was injected into the job's own image: a container job's steps run right here. */
  insideJobImage?: boolean | undefined;
  /** Step shells started ahead (ready-shell.ts); without them every step's shell is spawned. */
  shells?: ReadyShells | undefined;
}

/** Runs one job's steps in order and reports everything through `send`. */
export class JobRunner {
  private current: RunningStep | undefined;
  private stopped: 'cancel' | 'timeout' | undefined;
  private pending: { idx: number | null; stream: LogStream; lines: string[]; bytes: number } | undefined;
  private flushTimer: NodeJS.Timeout | undefined;
  private readonly marker = randomBytes(12).toString('hex');
  /** Every step run so far: their process groups and pipes are the job's until it ends. */
  private readonly steps: RunningStep[] = [];
  /** The job's first process and the pid counters before it: its end reads only younger pids. */
  private firstPid: PidMark | undefined;
  /** A step ran before any mark was read: no pid window can hold the job (see the first step). */
  private unbounded = false;
  /** Kills the steps' process groups if the agent dies before it cleans up (dead-man.ts). */
  private readonly deadMan: DeadManSwitch;
  private ended = false;
  private congestionTimer: NodeJS.Timeout | undefined;
  private releasing = false;

  constructor(private readonly opts: JobRunnerOptions) {
    this.deadMan = opts.deadMan ?? new DeadManSwitch();
  }

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
    // At once: a directory is made in microseconds, and a trip through the thread pool would let the
    // job's first messages (and the orchestrator's work on them) go ahead of its first step.
    const workspace = mkdtempSync(join(this.opts.workDir ?? tmpdir(), `kici-${job.id}-`));
    const jobTimer = job.timeoutSeconds
      ? setLongTimeout(() => this.cancel('timeout'), job.timeoutSeconds * 1000)
      : undefined;
    let result: JobResult = 'succeeded';
    let exitCode: number | null = 0;
    let message: string | undefined;
    const oom = this.opts.oom ?? agentOomProbe();
    try {
      if (job.container && !this.opts.insideJobImage) {
        result = 'failed';
        exitCode = null;
        message = `job asks for container image "${job.container.image}", but this agent runs steps on its host; route it to an agent with kici:runtime:docker or kici:runtime:podman`;
        this.line(null, 'system', message);
      }
      for (let idx = 0; idx < job.steps.length && result === 'succeeded'; idx++) {
        if (this.stopped) break;
        const step = job.steps[idx]!;
        send({ type: 'step.started', jobId: job.id, idx, name: step.name });
        const started = performance.now();
        const oomBefore = await oom.kills();
        const ready = this.opts.shells?.take();
        // The start is stamped where it arrives: it must not wait behind a spawn, which blocks the
        // event loop. A waiting shell takes the step in a write to its pipe: the start then leaves
        // with the turn's other frames, after the step is under way.
        if (!ready) this.opts.flush?.();
        // A shell started ahead brings the counters read before it (readyMark).
        const counters = this.firstPid || ready ? undefined : markCounters();
        this.current = runStep({
          script: step.run,
          cwd: workspace,
          env: this.stepEnv(step.env),
          timeoutMs: step.timeoutSeconds ? step.timeoutSeconds * 1000 : undefined,
          ready,
          onLine: (stream, line) => this.line(idx, stream, line),
        });
        this.steps.push(this.current);
        // A shell started ahead is older than these counters: its own, read before it, bound the job.
        if (this.current.readyMark) {
          if (!this.unbounded) this.firstPid ??= this.current.readyMark;
        } else if (counters && this.current.pgid !== undefined)
          this.firstPid ??= { pid: this.current.pgid, ...counters };
        // A step that started with no counters read before it (its shell could not be handed over):
        // the job's processes are then not bounded by any later mark, and the end reads them all.
        else if (!this.firstPid && this.current.pgid !== undefined) this.unbounded = true;
        this.deadMan.guard(this.current.pgid);
        // The next step's shell starts while this one runs.
        if (idx + 1 < job.steps.length) this.opts.shells?.prepare();
        const out = await this.current.done;
        this.current = undefined;
        if (out.error) this.line(idx, 'system', `step could not start: ${out.error}`);
        // A job timeout stops the step the same way; only the step's own timer is its timeout.
        if (out.timedOut && this.stopped !== 'timeout') {
          message = `step "${step.name}" timed out after ${step.timeoutSeconds}s`;
          this.line(idx, 'system', message);
        }
        this.flush();
        send({
          type: 'step.finished',
          jobId: job.id,
          idx,
          exitCode: out.exitCode,
          timedOut: out.timedOut,
          durationMs: Math.round(performance.now() - started),
        });
        exitCode = out.exitCode;
        // SIGKILL plus a new OOM kill in our memory cgroup: the limit ended the step, say so.
        if (out.exitCode === 137 && !out.timedOut && !out.cancelled && !this.stopped) {
          const after = await oom.kills();
          // Only a group with a limit: the root group's counter counts OOMs anywhere on the host.
          const limit = await oom.limit();
          if (limit !== undefined && after !== undefined && after > (oomBefore ?? 0)) {
            message = oomMessage(step.name, limit);
            this.line(idx, 'system', message);
          }
        }
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
      jobTimer?.clear();
      await this.reap();
      const payload = job.env.KICI_EVENT_PATH;
      if (payload && EVENT_PAYLOAD_PATH.test(payload))
        await rm(payload, { force: true }).catch((err: unknown) =>
          this.line(
            null,
            'system',
            `could not remove the event payload ${payload}: ${(err as Error).message}`,
          ),
        );
      if (!this.opts.keepWorkspace)
        await rm(workspace, { recursive: true, force: true }).catch((err: unknown) =>
          this.line(null, 'system', `could not remove the workspace ${workspace}: ${(err as Error).message}`),
        );
      this.flush();
    }
    send({ type: 'job.finished', jobId: job.id, result, exitCode, ...(message ? { message } : {}) });
    return result;
  }

  private stepEnv(stepEnv: Record<string, string> | undefined): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = { ...(this.opts.baseEnv ?? process.env) };
    // Variables the agent itself holds that build steps must never see.
    for (const k of SECRET_ENV) delete env[k];
    return {
      ...env,
      CI: 'true',
      KICI: 'true',
      KICI_JOB_ID: this.opts.job.id,
      KICI_RUN_ID: this.opts.job.runId,
      KICI_JOB_NAME: this.opts.job.name,
      ...this.opts.job.env,
      ...stepEnv,
      // Last, so a job cannot unset it by accident.
      [JOB_MARKER_ENV]: this.marker,
    };
  }

  /**
   * The job is over: stop every process it left (found by its marker, or still in a step's process
   * group), then stop reading the pipes they held. Nothing of a job outlives its result.
   */
  private async reap(): Promise<void> {
    const pgids = new Set(this.steps.flatMap((s) => (s.pgid === undefined ? [] : [s.pgid])));
    // Only the job's steps were given the marker: a process older than the first one cannot carry it.
    const starts = this.steps.map((s) => s.startTicks);
    const bornFromTicks =
      starts.every((t) => t !== undefined) && starts.length ? Math.min(...starts) : undefined;
    await stopProcesses(
      { env: `${JOB_MARKER_ENV}=${this.marker}`, pgids, bornFromTicks, bornFromPid: this.firstPid },
      this.opts.reapGraceMs,
    );
    this.deadMan.release();
    // The last output is read without backpressure: the writers are gone, the pipes hold little.
    this.releasing = true;
    if (this.congestionTimer) clearTimeout(this.congestionTimer);
    this.congestionTimer = undefined;
    await Promise.all(this.steps.map((s) => s.release()));
    this.ended = true;
  }

  /** Lines are batched briefly so a chatty step costs one message per burst, not per line. */
  private line(idx: number | null, stream: LogStream, line: string): void {
    if (this.ended) return;
    // The line's share of the frame: its JSON form plus a comma, in UTF-8 bytes.
    const bytes = Buffer.byteLength(JSON.stringify(line)) + 1;
    const p = this.pending;
    if (
      p &&
      (p.idx !== idx || p.stream !== stream || p.bytes + bytes > MAX_FRAME_BYTES - FRAME_OVERHEAD_BYTES)
    )
      this.flush();
    if (!this.pending) this.pending = { idx, stream, lines: [], bytes: 0 };
    this.pending.lines.push(line);
    this.pending.bytes += bytes;
    if (this.pending.lines.length >= BATCH_LINES) this.flush();
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
    if (!this.congestionTimer && !this.releasing && this.opts.congested?.()) this.holdOutput();
  }

  /** Backpressure: stop reading every step's pipes until the link has caught up. */
  private holdOutput(): void {
    for (const s of this.steps) s.pause();
    const check = () => {
      if (!this.releasing && this.opts.congested?.()) {
        this.congestionTimer = setTimeout(check, 20);
        return;
      }
      this.congestionTimer = undefined;
      for (const s of this.steps) s.resume();
    };
    this.congestionTimer = setTimeout(check, 20);
  }
}
