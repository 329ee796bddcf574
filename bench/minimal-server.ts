/**
 * The least any orchestrator does for a cold start, in a small process: it takes the submit over
 * HTTP, answers it, starts the agent (the same launch as the confined floor's), answers its
 * register with an ack and the job in the same turn, and notes when the agent says the job's first
 * step started. Nothing is stored, checked or recorded: no token, no session, no claim, no sync.
 * What our cold start costs beyond this is what storing, checking and scheduling cost.
 *
 * Protocol, one JSON object per line (line-child.ts): `{i, op: 'arm', file, args, env, uid?, gid?}`
 * sets the launch of the next submit and is answered `{i}` once the previous agent has exited;
 * `{i, op: 'wait'}` is answered `{i, stepAt}` when the next step starts (wall clock, whole ms, as
 * our server stamps it). The HTTP port is in the `{ready, url}` line.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:http';
import { WebSocketServer, type WebSocket } from 'ws';
import type { AgentMessage, OrchestratorMessage } from '../dist/protocol/messages.js';
import { serveLines } from './line-child.ts';

interface Launch {
  file: string;
  args: string[];
  env: Record<string, string>;
  uid?: number;
  gid?: number;
}

let armed: Launch | undefined;
let agent: ChildProcess | undefined;
let agentGone: Promise<unknown> = Promise.resolve();
let stepWaiter: ((at: number) => void) | undefined;
let jobs = 0;

const http = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    JSON.parse(Buffer.concat(chunks).toString()); // read as a server would, then thrown away
    const id = `job-${++jobs}`;
    res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ jobs: [{ id }] }));
    const l = armed!;
    armed = undefined;
    agent = spawn(l.file, l.args, {
      detached: true,
      stdio: 'ignore',
      env: { ...l.env, KICI_ORCHESTRATOR_URL: wsUrl },
      ...(l.uid !== undefined ? { uid: l.uid, gid: l.gid } : {}),
    });
    const child = agent;
    agentGone = new Promise((r) => child.once('exit', r));
  });
});
const wss = new WebSocketServer({ server: http, path: '/ws' });
const send = (ws: WebSocket, m: OrchestratorMessage) => ws.send(JSON.stringify(m));
wss.on('connection', (ws) => {
  ws.on('message', (data) => {
    const m = JSON.parse(String(data)) as AgentMessage;
    if (m.type === 'register') {
      send(ws, {
        type: 'register.ack',
        agentId: m.agentId,
        labels: m.labels,
        scalerManaged: true,
        pendingDispatch: true,
        warmPool: false,
        heartbeatIntervalMs: 10_000,
        acksResults: true,
      });
      send(ws, {
        type: 'job.assign',
        job: {
          id: `job-${jobs}`,
          runId: `run-${jobs}`,
          name: 'cold',
          steps: [{ name: 'one', run: 'true' }],
          env: {},
        },
      });
    } else if (m.type === 'step.started') {
      stepWaiter?.(Date.now());
      stepWaiter = undefined;
    } else if (m.type === 'job.finished') {
      send(ws, { type: 'job.finished.ack', jobId: m.jobId });
      // Like the raw start, the agent is gone before the next one is started.
      if (agent?.pid) process.kill(-agent.pid, 'SIGKILL');
    }
  });
});
await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
const port = (http.address() as { port: number }).port;
const wsUrl = `ws://127.0.0.1:${port}/ws`;

// One request at a time: the bench arms a start, then waits for its step, then arms the next.
serveLines<{ i: number; op: 'arm' | 'wait' } & Launch>(
  (r) =>
    r.op === 'arm'
      ? agentGone.then(() => {
          armed = r;
          return {};
        })
      : new Promise((answered) => (stepWaiter = (stepAt) => answered({ stepAt }))),
  () => {
    // Its group may be gone already, with its exit not yet heard here: nothing is left to stop.
    if (agent?.pid && agent.exitCode === null)
      try {
        process.kill(-agent.pid, 'SIGKILL');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
      }
    wss.close();
    http.close();
  },
  { url: `http://127.0.0.1:${port}` },
);
