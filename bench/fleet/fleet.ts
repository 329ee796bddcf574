/**
 * A synthetic fleet: N agent sessions in one process, each a real WebSocket to a real orchestrator,
 * speaking the agent protocol (register, heartbeat, take a job, report its steps, finish). It runs
 * no commands: a step "runs" for `stepMs` and succeeds, so thousands of agents cost the fleet's
 * process little and the orchestrator under test sees exactly what a real agent would send.
 *
 * Built on the protocol module: messages are the protocol's types, and what the orchestrator sends
 * is checked with the same parser the real agent uses.
 */
import { WebSocket } from 'ws';
import { parseOrchestratorMessage } from '../../dist/protocol/orchestrator-messages.js';
import type { AgentMessage, AssignedJob, OrchestratorMessage } from '../../src/protocol/messages.ts';

const PROTOCOL_VERSION = 1;

export interface FleetAgentSpec {
  agentId: string;
  token: string;
  labels: string[];
}

export interface FleetOptions {
  /** The orchestrator's agent endpoint, e.g. ws://127.0.0.1:8080/ws. */
  url: string;
  /** How long each step "runs" before it reports success (default 0). */
  stepMs?: number;
  /** Override the heartbeat interval the orchestrator asks for (ms); default: as asked. */
  heartbeatMs?: number;
  /** Connections opened at once while registering (the orchestrator admits 32 per address). */
  concurrency?: number;
  /** Told when an agent receives a job (performance.now() time), e.g. to measure dispatch latency. */
  onAssign?: (agentId: string, job: AssignedJob, at: number) => void;
  /** Told when a job's result has been acknowledged as stored. */
  onDone?: (agentId: string, jobId: string, at: number) => void;
}

/** One agent session: one socket, one job at a time, like a static `kici-agent`. */
export class FleetAgent {
  private ws: WebSocket | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  registered = false;
  jobsDone = 0;
  /** Every message the orchestrator sent, in order (their types): for the equivalence test. */
  readonly seen: OrchestratorMessage['type'][] = [];

  readonly spec: FleetAgentSpec;
  private readonly opts: FleetOptions;

  // Plain fields, not parameter properties: node runs the benches with type stripping only.
  constructor(spec: FleetAgentSpec, opts: FleetOptions) {
    this.spec = spec;
    this.opts = opts;
  }

  /** Connect and register; resolves on `register.ack`, rejects on refusal or close. */
  connect(): Promise<void> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(this.opts.url, { perMessageDeflate: false });
      this.ws = ws;
      ws.on('open', () =>
        this.send({
          type: 'register',
          protocol: PROTOCOL_VERSION,
          agentId: this.spec.agentId,
          token: this.spec.token,
          labels: this.spec.labels,
          version: 'synthetic-fleet',
          hostname: 'synthetic-fleet',
          jobsDone: 0,
        }),
      );
      ws.on('message', (data) => {
        const checked = parseOrchestratorMessage(String(data));
        if (!checked.ok) return reject(new Error(`${this.spec.agentId}: bad message: ${checked.problem}`));
        const msg = checked.msg;
        this.seen.push(msg.type);
        if (msg.type === 'register.ack') {
          this.registered = true;
          this.askedMs = msg.heartbeatIntervalMs;
          this.heartbeatEvery(this.opts.heartbeatMs);
          resolve();
        } else if (msg.type === 'register.rejected') reject(new Error(`${this.spec.agentId}: ${msg.reason}`));
        else if (msg.type === 'job.assign') void this.run(msg.job);
        else if (msg.type === 'job.finished.ack')
          this.opts.onDone?.(this.spec.agentId, msg.jobId, performance.now());
      });
      ws.on('error', (err) => reject(err));
      ws.on('close', (code, reason) => {
        this.registered = false;
        clearInterval(this.heartbeat);
        reject(new Error(`${this.spec.agentId}: closed ${code} ${String(reason)}`));
      });
    });
  }

  /** Heartbeat every `ms`, or as the orchestrator asked when undefined. */
  heartbeatEvery(ms: number | undefined): void {
    clearInterval(this.heartbeat);
    if (!this.registered) return;
    this.heartbeat = setInterval(() => this.send({ type: 'heartbeat' }), ms ?? this.askedMs);
  }

  private askedMs = 10_000;

  private async run(job: AssignedJob): Promise<void> {
    this.opts.onAssign?.(this.spec.agentId, job, performance.now());
    this.send({ type: 'job.started', jobId: job.id });
    for (const [idx, step] of job.steps.entries()) {
      this.send({ type: 'step.started', jobId: job.id, idx, name: step.name });
      if (this.opts.stepMs) await new Promise((r) => setTimeout(r, this.opts.stepMs));
      this.send({ type: 'log', jobId: job.id, idx, stream: 'stdout', lines: [`synthetic ${step.name}`] });
      this.send({
        type: 'step.finished',
        jobId: job.id,
        idx,
        exitCode: 0,
        timedOut: false,
        durationMs: this.opts.stepMs ?? 0,
      });
    }
    this.jobsDone++;
    this.send({ type: 'job.finished', jobId: job.id, result: 'succeeded', exitCode: 0 });
  }

  private send(msg: AgentMessage): void {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(msg));
  }

  close(): Promise<void> {
    clearInterval(this.heartbeat);
    const ws = this.ws;
    if (!ws || ws.readyState === WebSocket.CLOSED) return Promise.resolve();
    return new Promise((r) => {
      ws.once('close', () => r());
      ws.close(1000);
    });
  }
}

/** N sessions. `start` registers them, `concurrency` at a time, and resolves once all are registered. */
export class SyntheticFleet {
  readonly agents: FleetAgent[];

  constructor(specs: FleetAgentSpec[], opts: FleetOptions) {
    this.agents = specs.map((s) => new FleetAgent(s, opts));
    this.concurrency = opts.concurrency ?? 16;
  }

  private readonly concurrency: number;

  async start(): Promise<void> {
    let next = 0;
    const worker = async () => {
      while (next < this.agents.length) {
        const a = this.agents[next++]!;
        // The orchestrator answers 503 while its unregistered connections are at their limit.
        for (let attempt = 0; ; attempt++) {
          try {
            await a.connect();
            break;
          } catch (err) {
            // Also refused when a starved host let the register frame miss the server's deadline.
            if (attempt >= 20 || !/503|no register message/.test(String(err))) throw err;
            await new Promise((r) => setTimeout(r, 20 * (attempt + 1)));
          }
        }
      }
    };
    await Promise.all(Array.from({ length: this.concurrency }, worker));
  }

  async stop(): Promise<void> {
    await Promise.all(this.agents.map((a) => a.close()));
  }
}
