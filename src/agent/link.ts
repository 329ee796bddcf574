import { WebSocket } from 'ws';
import { hostname } from 'node:os';
import {
  CloseCodes,
  FATAL_CLOSE_CODES,
  PROTOCOL_VERSION,
  type AgentMessage,
  type ClaimAckMessage,
  type OrchestratorMessage,
  type RegisterAckMessage,
} from '../protocol/messages.js';
import { parseOrchestratorMessage } from '../protocol/orchestrator-messages.js';
import type { AgentConfig } from './config.js';
import { coalesceWrites, type HeldWrites } from '../util/coalesce-writes.js';
import { hostLabels } from './host-labels.js';
import { encodeFrames } from './frames.js';
import type { AgentLog } from './agent-log.js';
import { Redial } from './redial.js';

const OUTBOX_LIMIT = 20_000;
/** Past this much unsent data on the socket, the job's output is not read until it drains. */
const SEND_BACKLOG_BYTES = 8 * 1024 * 1024;

/** What the connection may read and ask of the agent. */
export interface LinkHost {
  readonly log: AgentLog;
  /** Closing the connection to exit? Its close is then the end, not a loss to recover from. */
  isLeaving(): boolean;
  /** What a registration says of the agent's jobs: the one it runs (so it is kept), and how many it ran. */
  jobs(): { activeJobId?: string; jobsDone: number };
  /** A valid message from the orchestrator. */
  received(msg: OrchestratorMessage): void;
  /** The connection the agent closed to leave is closed. */
  left(): void;
  /** The orchestrator refused this agent, which no retry can change. */
  refused(): void;
  /** The orchestrator stayed unreachable for longer than the agent may wait (reconnectTimeoutMs). */
  unreachable(): void;
}

/**
 * The agent's connection to the orchestrator: dialled, registered (after redeeming a claim code),
 * kept alive by heartbeats, and dialled again after a loss (redial.ts). Messages produced while the
 * link is down wait in an outbox, so a reconnect after an orchestrator restart still delivers the
 * job's result. The agent reads its state through the getters and acts on it through intents.
 */
export class AgentLink {
  private ws: WebSocket | undefined;
  /** Holds this turn's frames back to send them in one write (see coalesceWrites). */
  private hold: HeldWrites | undefined;
  private isRegistered = false;
  /** This process's session secret (from its first register.ack): proves a reconnect is us. */
  private session: string | undefined;
  private outbox: AgentMessage[] = [];
  /** The last job result, kept until the orchestrator acknowledges that it stored it. */
  private unackedResult: AgentMessage | undefined;
  private acksResults = false;
  private heartbeat: NodeJS.Timeout | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private readonly redial: Redial;
  /** Who the agent registers as: from its config, or from its redeemed claim (a reconnect reuses it). */
  private agentId: string;
  private token: string;
  private labels: string[];

  constructor(
    private readonly cfg: Readonly<AgentConfig>,
    private readonly version: string,
    private readonly host: LinkHost,
  ) {
    this.redial = new Redial(cfg);
    this.agentId = cfg.agentId;
    this.token = cfg.token;
    this.labels = cfg.labels;
  }

  /** Registered on the current connection: what is sent goes out at once. */
  get registered(): boolean {
    return this.isRegistered;
  }

  /** Messages wait in the outbox for a connection to deliver them. */
  get unsent(): boolean {
    return this.outbox.length > 0;
  }

  /** The last result is not yet stored, by an orchestrator that says when it stores one. */
  get unstored(): boolean {
    return this.acksResults && this.unackedResult !== undefined;
  }

  /** Sent data piles up on the socket (see SEND_BACKLOG_BYTES). */
  get congested(): boolean {
    return (this.ws?.bufferedAmount ?? 0) > SEND_BACKLOG_BYTES;
  }

  connect(): void {
    this.redial.dialling();
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
      if (!this.token && this.cfg.claimCode)
        return this.sendNow({ type: 'claim', protocol: PROTOCOL_VERSION, code: this.cfg.claimCode });
      this.register();
    });
    this.listen(ws);
  }

  /** The claim was redeemed: the agent now has an id and a token, and registers with them. */
  redeemed(ack: ClaimAckMessage): void {
    // The claim names who this agent is; the token never leaves memory.
    this.agentId = ack.agentId;
    this.token = ack.token;
    this.labels = [...new Set([...this.labels, ...ack.labels])];
    this.host.log('info', `claim redeemed: this agent is ${ack.agentId}`);
    this.register();
  }

  /** Registered: what waited for a connection is sent, and heartbeats start. */
  accepted(ack: RegisterAckMessage): void {
    this.isRegistered = true;
    this.redial.registered();
    this.host.log('info', `registered as ${ack.agentId}`);
    if (ack.session) this.session = ack.session;
    this.acksResults = ack.acksResults === true;
    const queued = this.outbox;
    this.outbox = [];
    for (const m of queued) this.send(m);
    // A result sent on the old connection may never have been stored: send it again (settling is idempotent).
    if (this.unackedResult && !queued.includes(this.unackedResult)) this.send(this.unackedResult);
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = setInterval(() => this.sendNow({ type: 'heartbeat' }), ack.heartbeatIntervalMs);
  }

  /** The orchestrator stored the result of `jobId`: it is no longer sent again on a reconnect. */
  stored(jobId: string): void {
    if (this.unackedResult?.type === 'job.finished' && this.unackedResult.jobId === jobId)
      this.unackedResult = undefined;
  }

  /** Sends now when registered, else queues for the next registration (log lines only up to a limit). */
  send(msg: AgentMessage): void {
    if (msg.type === 'job.finished') this.unackedResult = msg;
    if (this.isRegistered && this.ws?.readyState === WebSocket.OPEN) this.sendNow(msg);
    else if (this.outbox.length < OUTBOX_LIMIT || msg.type !== 'log') this.outbox.push(msg);
  }

  /** What was sent in this turn leaves now, not at its end. */
  flush(): void {
    this.hold?.flush();
  }

  /** Sends on an open connection, registered or not; with none, the message is dropped. */
  sendNow(msg: AgentMessage): void {
    if (this.ws?.readyState !== WebSocket.OPEN) return;
    this.hold?.();
    for (const data of encodeFrames(msg, (what) => this.host.log('warn', `dropped ${what}`)))
      this.ws.send(data);
  }

  /** Closes an open connection (its close then ends the agent); false when none is open. */
  close(reason: string): boolean {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN) return false;
    ws.close(1000, reason);
    return true;
  }

  /** The agent exits: no more heartbeats or dials, and the socket goes without its close handled. */
  end(): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.ws?.removeAllListeners('close');
    if (this.ws && this.ws.readyState !== WebSocket.CLOSED) this.ws.terminate();
  }

  private register(): void {
    const labels = [...new Set([...this.labels, ...hostLabels()])];
    this.sendNow({
      type: 'register',
      protocol: PROTOCOL_VERSION,
      agentId: this.agentId,
      token: this.token,
      labels,
      version: this.version,
      hostname: hostname(),
      ...this.host.jobs(),
      ...(this.session ? { session: this.session } : {}),
    });
  }

  private listen(ws: WebSocket): void {
    ws.on('message', (data) => {
      const checked = parseOrchestratorMessage(String(data));
      if (checked.ok) return this.host.received(checked.msg);
      this.host.log('warn', `ignored an invalid message from the orchestrator: ${checked.problem}`);
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
        if (this.redial.busy()) this.host.log('warn', 'orchestrator busy (HTTP 503); retrying with backoff');
        return;
      }
      if (!this.isRegistered && !(refused && this.redial.inFirstDial()))
        this.host.log('warn', `connection error: ${err.message}`);
    });
    ws.on('close', (code, reasonBuf) => this.onClose(code, String(reasonBuf)));
  }

  private onClose(code: number, reason: string): void {
    const wasRegistered = this.isRegistered;
    this.isRegistered = false;
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
    if (this.host.isLeaving()) return this.host.left();
    // Without a session of our own, a refused session is an earlier process of this agent that
    // the orchestrator still holds (its job is not settled yet): wait for it. With one, our own
    // proof was refused, which no retry can change.
    const fatal =
      FATAL_CLOSE_CODES.includes(code) || (code === CloseCodes.sessionUnproven && this.session !== undefined);
    if (fatal) {
      this.host.log('error', `orchestrator refused this agent (${code}): ${reason || 'no reason given'}`);
      return this.host.refused();
    }
    const now = performance.now();
    const down = this.redial.lost(now);
    if (wasRegistered)
      this.host.log('warn', `connection lost (${code}${reason ? `: ${reason}` : ''}); reconnecting`);
    if (this.cfg.reconnectTimeoutMs > 0 && down >= this.cfg.reconnectTimeoutMs) {
      this.host.log('error', `orchestrator unreachable for ${this.cfg.reconnectTimeoutMs} ms; giving up`);
      return this.host.unreachable();
    }
    this.reconnectTimer = setTimeout(() => this.connect(), this.redial.nextWaitMs(now));
  }
}
