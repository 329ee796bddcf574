/**
 * The real agent against a recording orchestrator: a job's start leaves with its first step's start,
 * before the step runs, and the step's end leaves with the job's result (two wake-ups of the
 * orchestrator instead of four); a held mark says how long it was held.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import { afterEach, describe, expect, it } from 'vitest';
import { MARK_HOLD_MS } from '../../src/agent/mark-hold.js';
import { AGENT_BIN, eventually, runNode } from '../helpers/orchestrator.js';

interface Seen {
  type: string;
  /** Which socket read (data event) carried it. */
  read: number;
  atMs: number;
  heldMs?: number;
}

let server: Server | undefined;
let stopAgent: (() => void) | undefined;
afterEach(async () => {
  stopAgent?.();
  stopAgent = undefined;
  await new Promise((r) => (server ? server.close(r) : r(undefined)));
  server = undefined;
});

/**
 * A minimal orchestrator: acknowledges the register, assigns one job, records what comes back.
 * `onMessage` sees each message as it arrives.
 */
async function recordJob(run: string, onMessage: (type: string) => void = () => undefined): Promise<Seen[]> {
  server = createServer();
  const wss = new WebSocketServer({ server, path: '/ws' });
  const seen: Seen[] = [];
  let reads = 0;
  wss.on('connection', (ws: WebSocket, req) => {
    // ws reads the socket first and emits the read's messages at once; this counts the reads after.
    req.socket.on('data', () => reads++);
    ws.on('message', (data) => {
      const m = JSON.parse(String(data)) as { type: string; heldMs?: number; agentId?: string };
      seen.push({ type: m.type, read: reads, atMs: performance.now(), heldMs: m.heldMs });
      onMessage(m.type);
      if (m.type === 'register')
        ws.send(
          JSON.stringify({
            type: 'register.ack',
            agentId: m.agentId,
            labels: ['linux'],
            scalerManaged: false,
            pendingDispatch: false,
            warmPool: false,
            heartbeatIntervalMs: 60_000,
            acksResults: true,
          }),
        );
      if (m.type === 'register')
        ws.send(
          JSON.stringify({
            type: 'job.assign',
            job: { id: 'job-1', runId: 'run-1', name: 'j', steps: [{ name: 'only', run }], env: {} },
          }),
        );
      if (m.type === 'job.finished') ws.send(JSON.stringify({ type: 'job.finished.ack', jobId: 'job-1' }));
    });
  });
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  const agent = runNode([AGENT_BIN], {
    KICI_ORCHESTRATOR_URL: `ws://127.0.0.1:${port}/ws`,
    KICI_AGENT_ID: 'mark-hold-agent',
    KICI_AGENT_TOKEN: 'unchecked-here',
    KICI_LABELS: 'linux',
  });
  stopAgent = () => agent.child.kill('SIGKILL');
  await eventually(() => seen.some((s) => s.type === 'job.finished'), 20_000, 'the job result');
  return seen.filter((s) => s.type !== 'register' && s.type !== 'heartbeat');
}

describe('agent progress marks', () => {
  it("a job's start leaves with its step's start, and the step's end with the result: two reads", async () => {
    const seen = await recordJob('true');
    expect(seen.map((s) => s.type)).toEqual(['job.started', 'step.started', 'step.finished', 'job.finished']);
    const [started, stepStarted, stepFinished, finished] = seen as [Seen, Seen, Seen, Seen];
    expect(stepStarted.read).toBe(started.read);
    expect(finished.read).toBe(stepFinished.read);
    expect(finished.read).not.toBe(started.read);
    // Held on the agent, so they say for how long (the orchestrator backdates them by that).
    expect(started.heldMs).toBeGreaterThan(0);
    expect(started.heldMs).toBeLessThanOrEqual(MARK_HOLD_MS);
  });

  it("the start marks leave as the step begins, not on the hold's timer", async () => {
    const seen = await recordJob('sleep 0.5');
    const at = (type: string) => seen.find((s) => s.type === type)!;
    // Released by the runner right before the step runs: the step's start waited for nothing.
    expect(at('step.started').heldMs ?? 0).toBe(0);
    expect(at('job.started').heldMs ?? 0).toBeLessThan(MARK_HOLD_MS);
    expect(at('job.finished').atMs - at('step.started').atMs).toBeGreaterThan(300);
  });

  it("a long step's end is not held: it leaves with the result, at once", async () => {
    const seen = await recordJob('sleep 0.8');
    const at = (type: string) => seen.find((s) => s.type === type)!;
    expect(at('job.finished').atMs - at('step.started').atMs).toBeGreaterThan(500);
    expect(at('step.finished').read).toBe(at('job.finished').read);
    // A timer can fire a little late; nothing waits long for company.
    for (const s of seen) expect(s.heldMs ?? 0).toBeLessThan(MARK_HOLD_MS + 200);
  });
});
