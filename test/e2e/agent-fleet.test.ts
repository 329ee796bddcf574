/**
 * The fleet view: `kici-admin agent list` shows each agent's version, host name, backend and idle
 * time (sent by the agent at registration), and `agent drain --selector <labels>` / `--all` drain
 * many agents at once.
 */
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN_BIN,
  AGENT_BIN,
  alive,
  ROOT,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

interface Listed {
  id: string;
  state: string;
  version: string | null;
  hostname: string | null;
  backend: string | null;
  idleMs: number | null;
}

let t: TestOrchestrator;
const agents: ReturnType<typeof runNode>[] = [];
const FLEET = { 'fleet-a1': 'linux,a', 'fleet-a2': 'linux,a', 'fleet-b1': 'linux,b' };

beforeAll(async () => {
  t = await startTestOrchestrator();
  const registered = new Set<string>();
  const all = new Promise<void>((resolve) => {
    const off = t.orch.events.on('agent.registered', (e) => {
      registered.add(e.agentId);
      if (registered.size === Object.keys(FLEET).length) {
        off();
        resolve();
      }
    });
  });
  for (const [agentId, labels] of Object.entries(FLEET)) {
    const tok = await t.api<{ token: string }>('POST', '/api/v1/agents/tokens', {
      labels: labels.split(','),
      agentId,
    });
    expect(tok.status).toBe(201);
    agents.push(
      runNode([AGENT_BIN], {
        KICI_ORCHESTRATOR_URL: t.orch.wsUrl,
        KICI_AGENT_ID: agentId,
        KICI_AGENT_TOKEN: tok.body.token,
        KICI_LABELS: labels,
      }),
    );
  }
  await all;
});
afterAll(async () => {
  for (const a of agents) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGKILL');
  await t?.stop();
});

const admin = (args: string[]) =>
  runNode([ADMIN_BIN, ...args, '--json'], { KICI_URL: t.orch.url, KICI_ADMIN_TOKEN: t.orch.adminToken })
    .exited;

async function list(): Promise<Listed[]> {
  const r = await admin(['agent', 'list']);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Listed[];
}

describe('agent fleet view', () => {
  it('agent list shows version, host name, backend and idle time', async () => {
    const version = (JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { version: string })
      .version;
    const listed = await list();
    expect(listed.map((a) => a.id).sort()).toEqual(Object.keys(FLEET).sort());
    for (const a of listed) {
      expect(a).toMatchObject({ state: 'idle', version, hostname: hostname(), backend: 'static' });
      expect(a.idleMs).toBeGreaterThanOrEqual(0);
    }
    const text = await runNode([ADMIN_BIN, 'agent', 'list'], {
      KICI_URL: t.orch.url,
      KICI_ADMIN_TOKEN: t.orch.adminToken,
    }).exited;
    expect(text.stdout.split('\n')[0]).toMatch(/BACKEND\s+HOST\s+VERSION\s+UP\s+IDLE/);
  });

  it('drain --selector drains exactly the agents carrying every label; --all drains the rest', async () => {
    const some = await admin(['agent', 'drain', '--selector', 'linux,a']);
    expect(some.code, some.stderr).toBe(0);
    expect((JSON.parse(some.stdout) as Listed[]).map((a) => a.id).sort()).toEqual(['fleet-a1', 'fleet-a2']);
    const states = Object.fromEntries((await list()).map((a) => [a.id, a.state]));
    expect(states).toEqual({ 'fleet-a1': 'draining', 'fleet-a2': 'draining', 'fleet-b1': 'idle' });

    const rest = await admin(['agent', 'drain', '--all']);
    expect(rest.code, rest.stderr).toBe(0);
    expect((await list()).every((a) => a.state === 'draining')).toBe(true);
    // A selector nothing matches drains nothing, and says so.
    const none = await admin(['agent', 'drain', '--selector', 'windows']);
    expect(none.code).toBe(0);
    expect(JSON.parse(none.stdout)).toEqual([]);
  });
});
