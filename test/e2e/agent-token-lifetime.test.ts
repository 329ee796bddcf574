/**
 * Static agent token lifetimes: 90 days unless `--ttl never` is asked for, tokens expiring within
 * 14 days are flagged in `agent token list` and counted in a gauge, `rotate` issues a new token
 * while the old one keeps working for the grace, and a real agent whose token has expired is
 * refused with 4401 and exits 2 naming the reason.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  ADMIN_BIN,
  AGENT_BIN,
  alive,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
const agents: ReturnType<typeof runNode>[] = [];
afterEach(async () => {
  for (const a of agents.splice(0)) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGKILL');
  await Promise.all(agents.map((a) => a.exited));
  await t?.stop();
  t = undefined;
});

const DAY = 86_400_000;

async function admin<T>(args: string[]): Promise<T> {
  const r = await runNode([ADMIN_BIN, ...args, '--json'], {
    KICI_SERVER_URL: t!.orch.url,
    KICI_ADMIN_TOKEN: t!.orch.adminToken,
  }).exited;
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as T;
}

interface Minted {
  token: string;
  tokenId: string;
  expiresAt: string | null;
}

function agentWith(id: string, token: string) {
  const agent = runNode([AGENT_BIN], {
    KICI_ORCHESTRATOR_URL: t!.orch.wsUrl,
    KICI_AGENT_ID: id,
    KICI_AGENT_TOKEN: token,
    KICI_LABELS: 'linux',
  });
  agents.push(agent);
  return agent;
}

const connected = (id: string) =>
  eventually(
    async () => {
      const r = await t!.api<{ agents: { id: string; state: string }[] }>('GET', '/api/v1/agents');
      return r.body.agents.some((a) => a.id === id && a.state === 'idle');
    },
    30_000,
    `agent ${id} to register`,
  );

describe('static agent token lifetimes', () => {
  it('default to 90 days, never only when asked; the ones expiring soon are flagged and counted', async () => {
    t = await startTestOrchestrator();
    const before = Date.now();
    const plain = await admin<Minted>(['agent', 'token', 'create', '--labels', 'linux']);
    const lifetime = Date.parse(plain.expiresAt!) - before;
    expect(lifetime).toBeGreaterThan(90 * DAY - 60_000);
    expect(lifetime).toBeLessThanOrEqual(90 * DAY + 60_000);
    const forever = await admin<Minted>(['agent', 'token', 'create', '--labels', 'linux', '--ttl', 'never']);
    expect(forever.expiresAt).toBeNull();
    const soon = await admin<Minted>(['agent', 'token', 'create', '--labels', 'linux', '--ttl', '3d']);

    const list = await admin<{ id: string; expiresSoon: boolean }[]>(['agent', 'token', 'list']);
    const flag = (id: string) => list.find((x) => x.id === id)?.expiresSoon;
    expect([flag(plain.tokenId), flag(forever.tokenId), flag(soon.tokenId)]).toEqual([false, false, true]);
    const table = await runNode([ADMIN_BIN, 'agent', 'token', 'list'], {
      KICI_SERVER_URL: t.orch.url,
      KICI_ADMIN_TOKEN: t.orch.adminToken,
    }).exited;
    expect(table.stdout.split('\n').find((l) => l.startsWith(soon.tokenId))).toMatch(/\bexpiring\b/);
    const metrics = await (
      await fetch(`${t.orch.url}/metrics`, { headers: { authorization: `Bearer ${t.orch.adminToken}` } })
    ).text();
    expect(metrics).toMatch(/^kici_orch_agent_tokens_expiring 1$/m);
  });

  it('rotate: the new token works, and the old one until the grace ends', async () => {
    t = await startTestOrchestrator();
    const old = await admin<Minted>(['agent', 'token', 'create', '--labels', 'linux', '--id', 'rot-1']);
    const started = Date.now();
    const rotated = await admin<Minted & { agentId: string; old: { expiresAt: string } }>([
      'agent',
      'token',
      'rotate',
      old.tokenId,
      '--grace',
      '2h',
    ]);
    expect(rotated.agentId).toBe('rot-1');
    expect(rotated.token).not.toBe(old.token);
    // Same lifetime as the old token; the old one now ends after the grace.
    expect(Math.abs(Date.parse(rotated.expiresAt!) - started - 90 * DAY)).toBeLessThan(60_000);
    expect(Math.abs(Date.parse(rotated.old.expiresAt) - started - 2 * 3_600_000)).toBeLessThan(60_000);

    // Within the grace the old token still lets the agent in; then the new one does.
    const first = agentWith('rot-1', old.token);
    await connected('rot-1');
    first.child.kill('SIGTERM');
    expect((await first.exited).code).toBe(0);
    agentWith('rot-1', rotated.token);
    await connected('rot-1');
  });

  it('a real agent whose token expired is refused with 4401 and exits 2 naming the reason', async () => {
    t = await startTestOrchestrator();
    const tok = await admin<Minted>(['agent', 'token', 'create', '--labels', 'linux', '--id', 'exp-1']);
    // Its lifetime has run out (set in the store rather than waited for).
    await t.orch.store.db
      .updateTable('agent_tokens')
      .set({ expires_at: new Date(Date.now() - 1_000) })
      .where('id', '=', tok.tokenId)
      .execute();
    const agent = agentWith('exp-1', tok.token);
    const exit = await agent.exited;
    expect(exit.code).toBe(2);
    expect(exit.stderr).toMatch(/refused this agent \(4401\): token expired/);
    const list = await admin<{ id: string; state: string }[]>(['agent', 'token', 'list']);
    expect(list.find((x) => x.id === tok.tokenId)?.state).toBe('expired');
  });
});
