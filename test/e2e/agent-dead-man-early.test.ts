/**
 * A real kici-agent has its dead-man switch running before it registers: the switch is started
 * while the process is still small (its fork costs about half then), and a single-use agent's job,
 * which arrives right after the registration is acknowledged, no longer waits for that spawn. The
 * agent dials a bare WebSocket server here, which never answers, so only the agent's own start can
 * have started the switch.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterEach, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { AGENT_BIN, NODE, alive, eventually } from '../helpers/orchestrator.js';

const kids: { pid?: number | undefined; kill(sig?: NodeJS.Signals): boolean }[] = [];
const servers: WebSocketServer[] = [];
afterEach(() => {
  for (const c of kids.splice(0)) if (c.pid && alive(c.pid)) c.kill('SIGKILL');
  for (const s of servers.splice(0)) s.close();
});

/** Each child of `pid` with its argv, read from /proc. */
function childrenOf(pid: number): { pid: number; argv: string[] }[] {
  const ids = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
  return ids.flatMap((c) => {
    try {
      return [
        { pid: Number(c), argv: readFileSync(`/proc/${c}/cmdline`, 'utf8').split('\0').filter(Boolean) },
      ];
    } catch {
      return []; // gone meanwhile
    }
  });
}

/** Gone, or a zombie nobody has reaped yet: either way it runs no more. */
function ended(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.startsWith('Z');
  } catch {
    return true;
  }
}

it('the dead-man switch runs before the agent sends its registration, and leaves with the agent', async () => {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  servers.push(wss);
  await new Promise((r) => wss.once('listening', r));
  const port = (wss.address() as { port: number }).port;
  const registered = new Promise<string>((res) =>
    wss.once('connection', (ws) => ws.once('message', (data) => res(String(data)))),
  );
  const agent = spawn(NODE, [AGENT_BIN], {
    stdio: 'ignore',
    env: {
      PATH: process.env.PATH,
      KICI_ORCHESTRATOR_URL: `ws://127.0.0.1:${port}/ws`,
      KICI_AGENT_ID: 'early-1',
      KICI_AGENT_TOKEN: 'not-checked-here',
      KICI_LABELS: 'linux',
      KICI_SCALER_MANAGED: '1',
    },
  });
  kids.push(agent);
  expect(JSON.parse(await registered)).toMatchObject({ type: 'register', agentId: 'early-1' });
  // Nothing has answered the registration, yet the switch (a shell reading the agent's pipe) runs.
  const shells = childrenOf(agent.pid!).filter((c) => c.argv[0] === '/bin/sh' && c.argv[1] === '-c');
  expect(shells).toHaveLength(1);
  expect(shells[0]!.argv[2]).toContain('while read -r l');
  const watcher = shells[0]!.pid;
  const exited = new Promise((r) => agent.once('exit', r));
  agent.kill('SIGKILL');
  await exited;
  // Its pipe closed with the agent: the switch ends too (it held no step to stop).
  await eventually(() => ended(watcher), 10_000);
});
