import type { OrchestratorMessage, RegisterAckMessage } from '../protocol/messages.js';
import type { AgentConfig } from './config.js';
import { AgentLink } from './link.js';
import { JobRunner } from './job-runner.js';
import { DeadManSwitch } from './dead-man.js';
import { ReadyShells } from './ready-shells.js';
import { Departure } from './departure.js';
import type { AgentLog } from './agent-log.js';

export type { AgentLog } from './agent-log.js';
export { AgentExit } from './departure.js';
export { busyBackoffMs } from './redial.js';

/**
 * How long an agent is idle before it starts the next step's shell (ready-shell.ts): longer than
 * the orchestrator takes to hand a freed agent its next queued job, so a burst is not slowed.
 */
const READY_SHELL_IDLE_MS = 50;

/**
 * The agent's life: connect, register, take jobs, stream their output, and (when single-use) leave
 * after one job. The connection, and the outbox that carries a job's result across a reconnect, is
 * link.ts; how the agent drains, stops and leaves is departure.ts. What is left here is the jobs:
 * taking them, running them one at a time, and what the agent does between them.
 */
export class Agent {
  private readonly link: AgentLink;
  private readonly departure: Departure;
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
  private finish!: (code: number) => void;
  private readonly exited: Promise<number>;

  constructor(
    private readonly cfg: AgentConfig,
    private readonly log: AgentLog,
    version = '0.1.0',
    /** A reusable switch started ahead (kici-agent starts it before loading this module). */
    deadMan?: DeadManSwitch,
  ) {
    this.exited = new Promise((resolve) => (this.finish = resolve));
    this.deadMan = deadMan;
    this.shells = new ReadyShells(cfg.readyShell, undefined, (why) =>
      this.log('info', `step shells are not started ahead on this host (${why}); each step is spawned`),
    );
    this.link = new AgentLink(cfg, version, {
      log,
      isLeaving: () => this.departure.leaving,
      jobs: () => ({ ...(this.runner ? { activeJobId: this.runner.jobId } : {}), jobsDone: this.jobsDone }),
      received: (msg) => this.onMessage(msg),
      left: () => this.departure.left(),
      refused: () => this.departure.refused(),
      unreachable: () => this.departure.unreachable(),
    });
    this.departure = new Departure(this.link, {
      log,
      hasJob: () => this.runner !== undefined,
      cancelJob: () => this.runner?.cancel('cancel'),
      exit: (code) => this.exit(code),
    });
  }

  run(): Promise<number> {
    this.link.connect();
    return this.exited;
  }

  /** SIGTERM / SIGINT: `drain` finishes the current job before leaving, `cancel` cancels it (departure.ts). */
  stop(reason: string, mode: 'cancel' | 'drain' = 'cancel'): Promise<void> {
    return this.departure.stop(reason, mode);
  }

  private onMessage(msg: OrchestratorMessage): void {
    switch (msg.type) {
      case 'register.ack':
        return this.onRegistered(msg);
      case 'claim.ack':
        return this.link.redeemed(msg);
      case 'register.rejected':
        this.log('error', `registration refused (${msg.code}): ${msg.reason}`);
        return;
      case 'job.assign': {
        if (this.runner || (this.cfg.ephemeral && this.jobsDone > 0) || this.departure.stopping) {
          this.link.send({ type: 'job.rejected', jobId: msg.job.id, reason: 'agent is busy or done' });
          return;
        }
        this.departure.clearIdle();
        void this.runJob(
          new JobRunner({
            job: msg.job,
            send: (m) => this.link.send(m),
            flush: () => this.link.flush(),
            workDir: this.cfg.workDir,
            keepWorkspace: this.cfg.keepWorkspace,
            insideJobImage: this.cfg.jobImage,
            deadMan: this.watcher(),
            shells: this.shells,
            baseEnv: this.stepBase,
            congested: () => this.link.congested,
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
        this.link.stored(msg.jobId);
        if (!this.runner && (this.departure.draining || (this.cfg.ephemeral && this.jobsDone > 0)))
          this.departure.leave();
        return;
    }
  }

  /** The agent's dead-man switch, started again if it is gone (someone killed it). */
  private watcher(): DeadManSwitch {
    if (!this.deadMan?.alive) this.deadMan = new DeadManSwitch(true);
    return this.deadMan;
  }

  private onRegistered(ack: RegisterAckMessage): void {
    // Started while nothing waits on it, so a job's start does not spawn a process.
    if (!this.runner && !this.departure.stopping) this.watcher();
    this.link.accepted(ack);
    if (this.departure.draining) this.link.sendNow({ type: 'agent.draining' }); // a new connection must know too
    if (this.runner) return;
    if (this.departure.draining || (this.cfg.ephemeral && this.jobsDone > 0)) return this.departure.leave();
    // A job already on its way (bound to this agent) would only wait for the shell's spawn.
    if (!ack.pendingDispatch) this.shells.prepareWhenIdle(READY_SHELL_IDLE_MS);
    if (!this.cfg.ephemeral || ack.warmPool) return;
    // A bound agent waits for its own job a while; any other single-use agent leaves soon when idle.
    this.departure.armIdle(ack.pendingDispatch ? this.cfg.pendingDispatchTimeoutMs : this.cfg.idleTimeoutMs);
  }

  private async runJob(runner: JobRunner): Promise<void> {
    this.runner = runner;
    try {
      const result = await runner.run();
      this.log('info', `job ${runner.jobId} ${result}`);
    } catch (err) {
      this.log('error', `job ${runner.jobId} crashed the runner: ${(err as Error).message}`);
      this.link.send({
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
    if (this.departure.stopping && !this.departure.draining) return; // stop() leaves once the result is acknowledged
    if (this.cfg.ephemeral || this.departure.draining) return this.departure.leave();
    // Idle again: the next job's first step finds its shell waiting.
    this.shells.prepareWhenIdle(READY_SHELL_IDLE_MS);
  }

  private exit(code: number): void {
    this.departure.clearIdle();
    // Every job's processes were stopped before the agent exits: the watcher leaves quietly.
    if (!this.runner) this.deadMan?.disarm();
    this.shells.close();
    this.link.end();
    this.finish(code);
  }
}
