import { WebSocket } from 'ws';
import { hostname } from 'node:os';
import {
  CloseCodes,
  FATAL_CLOSE_CODES,
  PROTOCOL_VERSION,
  type AgentMessage,
  type OrchestratorMessage,
  type RegisterAckMessage,
} from '../protocol/messages.js';
import { parseOrchestratorMessage } from '../protocol/orchestrator-messages.js';
import type { AgentConfig } from './config.js';
import { coalesceWrites } from '../util/coalesce-writes.js';
import { hostLabels } from './host-labels.js';
import { encodeFrames, waitUntil } from './frames.js';
import { JobRunner } from './job-runner.js';
import { DeadManSwitch } from './dead-man.js';
import { ReadyShells } from './ready-shells.js';

export type AgentLog = (level: 'info' | 'warn' | 'error', msg: string) => void;

/** Exit codes, so a supervisor can tell a finished agent from a refused one. */
export const AgentExit = { ok: 0, error: 1, refused: 2, unreachable: 3 } as const;

const OUTBOX_LIMIT = 20_000;
/** First-dial retry of a scaler-started agent (see Agent.inFirstDial), and for how long. */
const FIRST_DIAL_RETRY_MS = 10;
const FIRST_DIAL_WINDOW_MS = 10_000;
/**
 * How long an agent is idle before it starts the next step's shell (ready-shell.ts): longer than
 * the orchestrator takes to hand a freed agent its next queued job, so a burst is not slowed.
 */
const READY_SHELL_IDLE_MS = 50;
/** Backoff while the orchestrator answers 503 (too many connections waiting to register). */
const BUSY_BACKOFF_BASE_MS = 100;
const BUSY_BACKOFF_MAX_MS = 5_000;
/** Past this much unsent data on the socket, the job's output is not read until it drains. */
const SEND_BACKLOG_BYTES = 8 * 1024 * 1024;

/**
 * The agent's life: connect, register, take jobs, stream their output, and (when single-use) leave
 * after one job. Messages produced while the link is down wait in an outbox, so a reconnect after an
 * orchestrator restart still delivers the job's result.
 */
export class Agent {
  private ws: WebSocket | undefined;
  /** Holds this turn's frames back to send them in one write (see coalesceWrites). */
  private hold: (() => void) | undefined;
  private registered = false;
  private runner: JobRunner | undefined;
  /** One dead-man switch for all of this agent's jobs (dead-man.ts), started before the first. */
  private deadMan: DeadManSwitch | undefined;
  /** The next step's shell, started while the agent is idle (ready-shell.ts). */
  private readonly shells: ReadyShells;
  /**
   * The environment every step starts from, read once: kici-agent has removed what no step may
   * inherit before it makes the agent, and nothing changes it after. Copying process.env itself
   * goes through its accessors, one variable at a time, on every step's start.
   */
  private readonly stepBase: NodeJS.ProcessEnv = { ...process.env };
  private jobsDone = 0;
  /** This process's session secret (from its first register.ack): proves a reconnect is us. */
  private session: string | undefined;
  private outbox: AgentMessage[] = [];
  /** The last job result, kept until the orchestrator acknowledges that it stored it. */
  private unackedResult: AgentMessage | undefined;
  private acksResults = false;
  private idleTimer: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private disconnectedSince: number | undefined;
  private attempt = 0;
  /** When a scaler-started agent first dialled; see inFirstDial. */
  private firstDialAt: number | undefined;
  private everRegistered = false;
  /** Consecutive 503 answers to our upgrade; the first of a streak is logged, the rest are not. */
  private busyStreak = 0;
  private lastDialBusy = false;
  /** Takes no new job; set by a drain or a stop. */
  private stopping = false;
  /** Finishing the current job, then leaving (first SIGTERM to a static agent). */
  private draining = false;
  /** Closing the connection to exit. */
  private leaving = false;
  private cancelling: Promise<void> | undefined;
  private finish!: (code: number) => void;
  private readonly exited: Promise<number>;

  constructor(
    private readonly cfg: AgentConfig,
    private readonly log: AgentLog,
    private readonly version = '0.1.0',
    /** A reusable switch started ahead (kici-agent starts it before loading this module). */
    deadMan?: DeadManSwitch,
  ) {
    this.exited = new Promise((resolve) => (this.finish = resolve));
    this.deadMan = deadMan;
    this.shells = new ReadyShells(cfg.readyShell, undefined, (why) =>
      this.log('info', `step shells are not started ahead on this host (${why}); each step is spawned`),
    );
  }

  run(): Promise<number> {
    this.connect();
    return this.exited;
  }

  /**
   * SIGTERM / SIGINT. `drain`: take no new job, finish the current one, report it, then leave.
   * `cancel` (or a second signal during a drain): cancel the job, report it cancelled, and leave.
   */
  stop(reason: string, mode: 'cancel' | 'drain' = 'cancel'): Promise<void> {
    if (this.leaving) return Promise.resolve();
    if (mode === 'drain' && !this.stopping) {
      this.stopping = true;
      this.draining = true;
      this.clearIdle();
      this.log(
        'info',
        `draining (${reason}): finishing the current job, then leaving; signal again to cancel it`,
      );
      this.sendNow({ type: 'agent.draining' });
      // Idle: leave once the last result is acknowledged; with no connection there is no one to wait for.
      if (!this.runner) this.leave(!this.registered);
      return Promise.resolve();
    }
    this.cancelling ??= this.cancelAndLeave(reason);
    return this.cancelling;
  }

  private async cancelAndLeave(reason: string): Promise<void> {
    this.stopping = true;
    this.draining = false;
    this.log('info', `stopping: ${reason}`);
    if (this.runner) {
      this.runner.cancel('cancel');
      await waitUntil(() => !this.runner, 10_000);
    }
    // Give the cancelled result a moment to be stored before the connection goes.
    await waitUntil(
      () => !this.registered || (!this.outbox.length && !(this.acksResults && this.unackedResult)),
      2_000,
    );
    this.leave(true);
  }
  /**
   * A scaler-started agent on a firewalled network is refused until the backend's rules for its
   * address apply, which is usually while it is still starting. Those first refusals are expected:
   * retried every FIRST_DIAL_RETRY_MS (every wait is start latency) and not logged.
   */
  private inFirstDial(now = performance.now()): boolean {
    return (
      this.cfg.scalerManaged &&
      !this.everRegistered &&
      this.firstDialAt !== undefined &&
      now - this.firstDialAt < FIRST_DIAL_WINDOW_MS
    );
  }

  private connect(): void {
    this.firstDialAt ??= performance.now();
    const ws = new WebSocket(this.cfg.orchestratorUrl, {
      handshakeTimeout: 10_000,
      ...(this.cfg.ca ? { ca: this.cfg.ca } : {}),
    });
    this.ws = ws;
    this.hold = undefined;
    // The socket under the WebSocket: the frames of one turn of the event loop leave in one write.
    ws.on('upgrade', (res) => {
      if (this.ws === ws) this.hold = coalesceWrites(res.socket);
    });
    ws.on('open', () => {
      // A claim-code agent trades its code for an id and a token first (once; a reconnect reuses them).
      if (!this.cfg.token && this.cfg.claimCode)
        return this.sendNow({ type: 'claim', protocol: PROTOCOL_VERSION, code: this.cfg.claimCode });
      this.sendRegister();
    });
    this.listen(ws);
  }

  private sendRegister(): void {
    const labels = [...new Set([...this.cfg.labels, ...hostLabels()])];
    this.sendNow({
      type: 'register',
      protocol: PROTOCOL_VERSION,
      agentId: this.cfg.agentId,
      token: this.cfg.token,
      labels,
      version: this.version,
      hostname: hostname(),
      ...(this.runner ? { activeJobId: this.runner.jobId } : {}),
      jobsDone: this.jobsDone,
      ...(this.session ? { session: this.session } : {}),
    });
  }

  private listen(ws: WebSocket): void {
    ws.on('message', (data) => {
      const checked = parseOrchestratorMessage(String(data));
      if (checked.ok) return this.onMessage(checked.msg);
      this.log('warn', `ignored an invalid message from the orchestrator: ${checked.problem}`);
      // A job we cannot read fails with the reason, by its id. Refusing it instead would put it back
      // in the queue, and the same agent could be offered it again and again.
      if (checked.jobId)
        this.send({
          type: 'job.finished',
          jobId: checked.jobId,
          result: 'failed',
          exitCode: null,
          message: `the agent could not read the job: ${checked.problem}`,
        });
    });
    ws.on('error', (err) => {
      const refused = (err as NodeJS.ErrnoException).code === 'ECONNREFUSED';
      // 503: the orchestrator has too many connections waiting to register; back off (onClose).
      if (/Unexpected server response: 503\b/.test(err.message)) {
        this.lastDialBusy = true;
        if (this.busyStreak++ === 0) this.log('warn', 'orchestrator busy (HTTP 503); retrying with backoff');
        return;
      }
      if (!this.registered && !(refused && this.inFirstDial()))
        this.log('warn', `connection error: ${err.message}`);
    });
    ws.on('close', (code, reasonBuf) => this.onClose(code, String(reasonBuf)));
  }

  private onMessage(msg: OrchestratorMessage): void {
    switch (msg.type) {
      case 'register.ack':
        return this.onRegistered(msg);
      case 'claim.ack':
        // The claim names who this agent is; the token never leaves memory.
        this.cfg.agentId = msg.agentId;
        this.cfg.token = msg.token;
        this.cfg.labels = [...new Set([...this.cfg.labels, ...msg.labels])];
        this.log('info', `claim redeemed: this agent is ${msg.agentId}`);
        return this.sendRegister();
      case 'register.rejected':
        this.log('error', `registration refused (${msg.code}): ${msg.reason}`);
        return;
      case 'job.assign': {
        if (this.runner || (this.cfg.ephemeral && this.jobsDone > 0) || this.stopping) {
          this.send({ type: 'job.rejected', jobId: msg.job.id, reason: 'agent is busy or done' });
          return;
        }
        this.clearIdle();
        void this.runJob(
          new JobRunner({
            job: msg.job,
            send: (m) => this.send(m),
            workDir: this.cfg.workDir,
            keepWorkspace: this.cfg.keepWorkspace,
            insideJobImage: this.cfg.jobImage,
            deadMan: this.watcher(),
            shells: this.shells,
            baseEnv: this.stepBase,
            congested: () => (this.ws?.bufferedAmount ?? 0) > SEND_BACKLOG_BYTES,
          }),
        );
        return;
      }
      case 'job.cancel':
        if (this.runner?.jobId === msg.jobId) this.runner.cancel('cancel');
        return;
      case 'shutdown':
        void this.stop(`orchestrator asked: ${msg.reason}`);
        return;
      case 'heartbeat.ack':
        return;
      case 'job.finished.ack':
        if (this.unackedResult?.type === 'job.finished' && this.unackedResult.jobId === msg.jobId)
          this.unackedResult = undefined;
        if (!this.runner && (this.draining || (this.cfg.ephemeral && this.jobsDone > 0))) this.leave();
        return;
    }
  }

  /** The agent's dead-man switch, started again if it is gone (someone killed it). */
  private watcher(): DeadManSwitch {
    if (!this.deadMan?.alive) this.deadMan = new DeadManSwitch(true);
    return this.deadMan;
  }

  private onRegistered(ack: RegisterAckMessage): void {
    this.registered = true;
    // Started while nothing waits on it, so a job's start does not spawn a process.
    if (!this.runner && !this.stopping) this.watcher();
    this.busyStreak = 0;
    this.everRegistered = true;
    this.attempt = 0;
    this.disconnectedSince = undefined;
    this.log('info', `registered as ${ack.agentId}`);
    if (ack.session) this.session = ack.session;
    this.acksResults = ack.acksResults === true;
    const queued = this.outbox;
    this.outbox = [];
    for (const m of queued) this.send(m);
    // A result sent on the old connection may never have been stored: send it again (settling is idempotent).
    if (this.unackedResult && !queued.includes(this.unackedResult)) this.send(this.unackedResult);
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = setInterval(() => this.sendNow({ type: 'heartbeat' }), ack.heartbeatIntervalMs);
    if (this.draining) this.sendNow({ type: 'agent.draining' }); // a new connection must know too
    if (this.runner) return;
    if (this.draining || (this.cfg.ephemeral && this.jobsDone > 0)) return this.leave();
    // A job already on its way (bound to this agent) would only wait for the shell's spawn.
    if (!ack.pendingDispatch) this.shells.prepareWhenIdle(READY_SHELL_IDLE_MS);
    if (!this.cfg.ephemeral || ack.warmPool) return;
    // A bound agent waits for its own job a while; any other single-use agent leaves soon when idle.
    this.armIdle(ack.pendingDispatch ? this.cfg.pendingDispatchTimeoutMs : this.cfg.idleTimeoutMs);
  }

  private async runJob(runner: JobRunner): Promise<void> {
    this.runner = runner;
    try {
      const result = await runner.run();
      this.log('info', `job ${runner.jobId} ${result}`);
    } catch (err) {
      this.log('error', `job ${runner.jobId} crashed the runner: ${(err as Error).message}`);
      this.send({
        type: 'job.finished',
        jobId: runner.jobId,
        result: 'failed',
        exitCode: null,
        message: 'agent error',
      });
    } finally {
      this.runner = undefined;
      this.jobsDone++;
    }
    if (this.stopping && !this.draining) return; // stop() leaves once the result is acknowledged
    if (this.cfg.ephemeral || this.draining) return this.leave();
    // Idle again: the next job's first step finds its shell waiting.
    this.shells.prepareWhenIdle(READY_SHELL_IDLE_MS);
  }

  /**
   * Leave once everything is sent: the outbox is empty and the last result acknowledged. `now`
   * skips that wait (a stop that already gave the result its chance).
   */
  private leave(now = false): void {
    if (this.leaving) return;
    if (!now) {
      if (!this.registered || this.outbox.length) return; // wait for reconnect to deliver results
      if (this.acksResults && this.unackedResult) return; // wait until the orchestrator stored the result
    }
    this.leaving = true;
    this.stopping = true;
    const ws = this.ws;
    if (ws && ws.readyState === WebSocket.OPEN) {
      ws.close(1000, 'job finished');
      setTimeout(() => this.exit(AgentExit.ok), 2_000).unref();
    } else this.exit(AgentExit.ok);
  }

  private armIdle(ms: number): void {
    this.clearIdle();
    this.idleTimer = setTimeout(() => {
      this.log('info', `idle for ${ms} ms, leaving`);
      this.leave();
    }, ms);
  }

  private clearIdle(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
  }

  private onClose(code: number, reason: string): void {
    const wasRegistered = this.registered;
    this.registered = false;
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
    if (this.leaving) return this.exit(AgentExit.ok);
    // Without a session of our own, a refused session is an earlier process of this agent that
    // the orchestrator still holds (its job is not settled yet): wait for it. With one, our own
    // proof was refused, which no retry can change.
    const fatal =
      FATAL_CLOSE_CODES.includes(code) || (code === CloseCodes.sessionUnproven && this.session !== undefined);
    if (fatal) {
      this.log('error', `orchestrator refused this agent (${code}): ${reason || 'no reason given'}`);
      if (!this.runner) return this.exit(AgentExit.refused);
      // Revoked mid-job: the job's processes are stopped before the agent exits, not left behind.
      this.stopping = true;
      this.runner.cancel('cancel');
      void waitUntil(() => !this.runner, 10_000).then(() => this.exit(AgentExit.refused));
      return;
    }
    const now = performance.now();
    this.disconnectedSince ??= now;
    if (wasRegistered)
      this.log('warn', `connection lost (${code}${reason ? `: ${reason}` : ''}); reconnecting`);
    if (this.cfg.reconnectTimeoutMs > 0 && now - this.disconnectedSince >= this.cfg.reconnectTimeoutMs) {
      this.log('error', `orchestrator unreachable for ${this.cfg.reconnectTimeoutMs} ms; giving up`);
      this.stopping = true;
      if (!this.runner) return this.exit(AgentExit.unreachable);
      // The job's clean-up (its background processes) must finish before the process exits.
      this.runner.cancel('cancel');
      void waitUntil(() => !this.runner, 10_000).then(() => this.exit(AgentExit.unreachable));
      return;
    }
    const busy = this.lastDialBusy;
    this.lastDialBusy = false;
    const wait = busy
      ? busyBackoffMs(this.busyStreak)
      : this.inFirstDial(now)
        ? FIRST_DIAL_RETRY_MS
        : Math.min(10_000, 250 * 2 ** Math.min(this.attempt++, 6));
    this.reconnectTimer = setTimeout(() => this.connect(), wait);
  }

  private send(msg: AgentMessage): void {
    if (msg.type === 'job.finished') this.unackedResult = msg;
    if (this.registered && this.ws?.readyState === WebSocket.OPEN) this.sendNow(msg);
    else if (this.outbox.length < OUTBOX_LIMIT || msg.type !== 'log') this.outbox.push(msg);
  }

  private sendNow(msg: AgentMessage): void {
    if (this.ws?.readyState !== WebSocket.OPEN) return;
    this.hold?.();
    for (const data of encodeFrames(msg, (what) => this.log('warn', `dropped ${what}`))) this.ws.send(data);
  }

  private exit(code: number): void {
    this.clearIdle();
    // Every job's processes were stopped before the agent exits: the watcher leaves quietly.
    if (!this.runner) this.deadMan?.disarm();
    this.shells.close();
    if (this.heartbeat) clearInterval(this.heartbeat);
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.ws?.removeAllListeners('close');
    if (this.ws && this.ws.readyState !== WebSocket.CLOSED) this.ws.terminate();
    this.finish(code);
  }
}

/**
 * How long to wait after the `streak`-th 503 in a row: exponential from BUSY_BACKOFF_BASE_MS up to
 * BUSY_BACKOFF_MAX_MS, jittered between half and all of it, so agents refused together come back apart.
 */
export function busyBackoffMs(streak: number, random: () => number = Math.random): number {
  const ceiling = Math.min(
    BUSY_BACKOFF_MAX_MS,
    BUSY_BACKOFF_BASE_MS * 2 ** Math.min(Math.max(streak - 1, 0), 10),
  );
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}
