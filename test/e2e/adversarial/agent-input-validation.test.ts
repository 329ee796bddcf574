/**
 * Every protocol message is validated in both directions: the real agent process checks what it is
 * sent. The orchestrator never sends a bad message, so this side is driven by a hand-made
 * orchestrator endpoint on 127.0.0.1 that sends them on purpose.
 */
import type { AddressInfo } from 'node:net';
import { afterEach, expect, it } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import { AGENT_BIN, alive, eventually, runNode } from '../../helpers/orchestrator.js';

let wss: WebSocketServer | undefined;
let agentPid: number | undefined;
afterEach(async () => {
  if (agentPid && alive(agentPid)) process.kill(agentPid, 'SIGKILL');
  agentPid = undefined;
  await new Promise<void>((r) => (wss ? wss.close(() => r()) : r()));
  wss = undefined;
});

it('an agent ignores invalid orchestrator messages, fails a job it cannot read, naming the field, and still works', async () => {
  wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise<void>((r) => wss!.once('listening', () => r()));
  const port = (wss.address() as AddressInfo).port;
  const received: { type: string; [k: string]: unknown }[] = [];
  let sock: WebSocket | undefined;
  wss.on('connection', (ws) => {
    sock = ws;
    ws.on('message', (d) => received.push(JSON.parse(String(d))));
  });
  const agent = runNode([AGENT_BIN], {
    KICI_ORCHESTRATOR_URL: `ws://127.0.0.1:${port}/ws`,
    KICI_AGENT_ID: 'checker',
    KICI_AGENT_TOKEN: 'kici_test',
    KICI_LABELS: 'x',
  });
  agentPid = agent.child.pid;
  await eventually(() => received.some((m) => m.type === 'register'), 10_000, 'the agent to register');
  const send = (m: unknown) => sock!.send(typeof m === 'string' ? m : JSON.stringify(m));

  // A heartbeat interval of 0 would make the agent spin; it is ignored, and a sane ack follows.
  const ack = {
    type: 'register.ack',
    agentId: 'checker',
    labels: ['x'],
    scalerManaged: false,
    pendingDispatch: false,
    warmPool: false,
    acksResults: true,
  };
  send({ ...ack, heartbeatIntervalMs: 0 });
  send({ ...ack, heartbeatIntervalMs: 60_000 });
  for (const junk of [
    'not json',
    'null',
    '[]',
    { type: 'job.cancel' },
    { type: 'who-knows' },
    { type: 'shutdown', reason: 7 },
  ])
    send(junk);
  send({
    type: 'job.assign',
    job: { id: 'j-bad', runId: 'r-1', name: 'bad', env: {}, steps: [{ name: 's' }] },
  });
  const failed = await eventually(
    () => received.find((m) => m.type === 'job.finished' && m.jobId === 'j-bad'),
    10_000,
    'the unreadable job to be failed',
  );
  expect(failed).toMatchObject({ result: 'failed', exitCode: null });
  expect(String(failed.message)).toContain('job.steps[0].run');
  send({ type: 'job.finished.ack', jobId: 'j-bad' });

  // Still alive and still working.
  send({
    type: 'job.assign',
    job: { id: 'j-good', runId: 'r-1', name: 'good', env: {}, steps: [{ name: 's', run: 'echo fine' }] },
  });
  const done = await eventually(
    () => received.find((m) => m.type === 'job.finished' && m.jobId === 'j-good'),
    15_000,
    'the valid job to finish',
  );
  expect(done).toMatchObject({ result: 'succeeded', exitCode: 0 });
  expect(received.filter((m) => m.type === 'heartbeat')).toHaveLength(0);
  send({ type: 'job.finished.ack', jobId: 'j-good' });
  send({ type: 'shutdown', reason: 'test over' });
  const exit = await agent.exited;
  expect(exit.code, exit.stderr).toBe(0);
  expect(exit.stderr).toContain('ignored an invalid message from the orchestrator');
});
