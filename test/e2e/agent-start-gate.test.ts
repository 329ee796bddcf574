import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { AGENT_BIN, alive, eventually, runNode } from '../helpers/orchestrator.js';

/**
 * The start gate of a firewalled container agent (src/agent/start-gate.ts), on a real kici-agent
 * process: it dials nothing until the gate opens, by signal or by file, and signals that come after
 * the gate opened are harmless. A bare WebSocket server stands in for the orchestrator: only the
 * moment of the first connection matters here.
 */

const SIGUSR2_BIT = 1n << 11n; // signal 12, bit 11 of /proc/<pid>/status SigCgt

let wss: WebSocketServer | undefined;
let dir: string | undefined;
const children: ReturnType<typeof runNode>[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) if (c.child.pid && alive(c.child.pid)) c.child.kill('SIGKILL');
  wss?.close();
  wss = undefined;
  if (dir) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

/** Does the process catch SIGUSR2 yet? Sending it before then would end a non-init process. */
function catchesGateSignal(pid: number): boolean {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('SigCgt:'));
  return line !== undefined && (BigInt(`0x${line.slice(7).trim()}`) & SIGUSR2_BIT) !== 0n;
}

async function gatedAgent() {
  wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((r) => wss!.once('listening', r));
  let connections = 0;
  wss.on('connection', () => connections++);
  dir = await mkdtemp(join(tmpdir(), 'kici-gate-'));
  const gate = join(dir, 'open');
  const agent = runNode([AGENT_BIN], {
    KICI_ORCHESTRATOR_URL: `ws://127.0.0.1:${(wss.address() as { port: number }).port}/ws`,
    KICI_AGENT_ID: 'scaler-container-gate0001',
    KICI_AGENT_TOKEN: 'not-checked-here',
    KICI_LABELS: 'gate',
    KICI_START_GATE: gate,
  });
  children.push(agent);
  const pid = agent.child.pid!;
  await eventually(() => catchesGateSignal(pid), 10_000, 'the gate handler');
  return { agent, pid, gate, connections: () => connections };
}

describe('agent start gate', () => {
  it('dials nothing while shut, and connects once the backend signals', async () => {
    const g = await gatedAgent();
    await new Promise((r) => setTimeout(r, 700));
    expect(g.connections()).toBe(0);
    expect(alive(g.pid)).toBe(true);
    process.kill(g.pid, 'SIGUSR2');
    await eventually(() => g.connections() > 0, 10_000, 'a connection after the signal');
  });

  it('opens when the gate file appears', async () => {
    const g = await gatedAgent();
    await new Promise((r) => setTimeout(r, 300));
    expect(g.connections()).toBe(0);
    await writeFile(g.gate, '');
    await eventually(() => g.connections() > 0, 10_000, 'a connection after the file');
  });

  it('takes later repeats of the signal without harm', async () => {
    const g = await gatedAgent();
    process.kill(g.pid, 'SIGUSR2');
    await eventually(() => g.connections() > 0, 10_000, 'a connection after the signal');
    // The backend repeats the signal until the agent registers: none of those may end the agent.
    for (let i = 0; i < 20; i++) {
      process.kill(g.pid, 'SIGUSR2');
      await new Promise((r) => setTimeout(r, 5));
    }
    await new Promise((r) => setTimeout(r, 300));
    expect(alive(g.pid)).toBe(true);
    expect(g.agent.output().stderr).not.toMatch(/start gate/);
  });
});
