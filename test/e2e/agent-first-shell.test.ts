/**
 * A fresh scaler agent whose host's shell was checked by the orchestrator (KICI_READY_SHELL=checked,
 * host-shell.ts) starts its first step's shell right after it sends its registration, and the
 * step it is then sent runs in that very process. Without the verdict it has no shell waiting
 * when its job comes. A real kici-agent dials a bare WebSocket server that plays the orchestrator.
 */
import { spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import { AGENT_BIN, NODE, alive, eventually } from '../helpers/orchestrator.js';
import { childrenOf } from '../helpers/processes.js';

const kids: { pid?: number | undefined; kill(sig?: NodeJS.Signals): boolean }[] = [];
const servers: WebSocketServer[] = [];
afterEach(() => {
  for (const c of kids.splice(0)) if (c.pid && alive(c.pid)) c.kill('SIGKILL');
  for (const s of servers.splice(0)) s.close();
});

const waitingShells = (pid: number) =>
  childrenOf(pid).filter((c) => c.argv[0] === '/bin/sh' && c.argv[1] === '-s' && c.argv.length === 2);

/**
 * Starts an agent, answers its registration as a cold start's (a job on its way) once `beforeAck`
 * has run, then sends it a one-step job that prints its shell's pid. The pids of the shells waiting
 * when the job was sent, and the pid the step printed.
 */
async function firstStep(readyShell: string | undefined, beforeAck: (agentPid: number) => Promise<void>) {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  servers.push(wss);
  await new Promise((r) => wss.once('listening', r));
  const port = (wss.address() as { port: number }).port;
  const frames: { type: string; lines?: string[] }[] = [];
  const registered = new Promise<WebSocket>((res) =>
    wss.once('connection', (ws) => {
      ws.on('message', (d) => frames.push(JSON.parse(String(d)) as { type: string }));
      ws.once('message', () => res(ws));
    }),
  );
  const agent = spawn(NODE, [AGENT_BIN], {
    stdio: 'ignore',
    env: {
      PATH: process.env.PATH,
      KICI_ORCHESTRATOR_URL: `ws://127.0.0.1:${port}/ws`,
      KICI_AGENT_ID: 'scaler-bm-first0001',
      KICI_AGENT_TOKEN: 'not-checked-here',
      KICI_LABELS: 'linux',
      KICI_SCALER_MANAGED: '1',
      ...(readyShell ? { KICI_READY_SHELL: readyShell } : {}),
    },
  });
  kids.push(agent);
  const ws = await registered;
  expect(frames[0]).toMatchObject({ type: 'register' });
  await beforeAck(agent.pid!);
  const send = (m: unknown) => ws.send(JSON.stringify(m));
  send({
    type: 'register.ack',
    agentId: 'scaler-bm-first0001',
    labels: ['linux'],
    scalerManaged: true,
    pendingDispatch: true,
    warmPool: false,
    heartbeatIntervalMs: 10_000,
  });
  const waiting = waitingShells(agent.pid!).map((c) => c.pid);
  send({
    type: 'job.assign',
    job: {
      id: 'j-first',
      runId: 'r-1',
      name: 'first',
      env: {},
      steps: [{ name: 's', run: 'echo "pid=$$"' }],
    },
  });
  const printed = () =>
    frames.flatMap((f) => (f.type === 'log' ? (f.lines ?? []) : [])).find((l) => l.startsWith('pid='));
  await eventually(() => printed() !== undefined, 15_000, "the step's output");
  return { waiting, stepPid: Number(printed()!.slice(4)) };
}

describe("a fresh scaler agent's first step", () => {
  it('with the host shell checked ahead: a shell waits from the registration on, and the step runs in it', async () => {
    const r = await firstStep('checked', async (pid) => {
      // The shell is started as the registration leaves, not when it is answered (none is yet).
      await eventually(() => waitingShells(pid).length === 1, 10_000, 'a waiting shell before the answer');
    });
    expect(r.waiting).toHaveLength(1);
    expect(r.stepPid).toBe(r.waiting[0]);
  });

  it('without it: no shell waits when the job comes, and the step is a process of its own', async () => {
    const r = await firstStep(undefined, () => Promise.resolve());
    expect(r.waiting).toEqual([]);
    expect(r.stepPid).toBeGreaterThan(0);
  });
});
