import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_BIN, alive, eventually, runNode } from '../helpers/orchestrator.js';
import {
  startOrchestratorProcess,
  startStaticAgentProcess,
  type OrchProcess,
} from '../helpers/orch-process.js';
import { freshTestDatabase, type TestDatabase } from '../helpers/pg-database.js';

/**
 * The `agents` table is shared by every instance. A starting instance used to mark every row gone
 * (its own start-up rule, "no socket survives", applied to the peers' agents too). Two processes; A
 * restarts; B's connected agent still shows connected, A's own stale row is gone.
 */

const tag = randomBytes(3).toString('hex');
let db: TestDatabase;
const procs: OrchProcess[] = [];
const agents: ReturnType<typeof runNode>[] = [];

beforeAll(async () => {
  db = await freshTestDatabase('clagents');
});
afterAll(async () => {
  for (const a of agents) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGTERM');
  await Promise.all(agents.map((a) => a.exited));
  for (const o of procs) await o.stop();
  await db.drop();
});

/** id → state (and the owning instance, a column the fix adds; `select *` so old code reads too). */
const rows = async () =>
  Object.fromEntries(
    (await db.query<{ id: string; state: string; instance_id?: string | null }>('select * from agents')).map(
      (r) => [r.id, { state: r.state, instance: r.instance_id }],
    ),
  );

describe('agents table across instances', () => {
  it('restarting A leaves the agents connected to B shown as connected', async () => {
    const env = { KICI_CLUSTER_HEARTBEAT_MS: '300' };
    const start = (id: string) =>
      startOrchestratorProcess({ databaseUrl: db.url, env, args: ['--instance-id', id] });
    const a = await start(`ga-${tag}`);
    procs.push(a);
    const b = await start(`gb-${tag}`);
    procs.push(b);
    const onA = await startStaticAgentProcess(a, `ga-agent-${tag}`, ['linux', `ga-${tag}`]);
    agents.push(onA);
    agents.push(await startStaticAgentProcess(b, `gb-agent-${tag}`, ['linux', `gb-${tag}`]));
    await eventually(
      async () => {
        const r = await rows();
        return (
          r[`ga-agent-${tag}`]?.state === 'connected' && r[`gb-agent-${tag}`]?.state === 'connected' && r
        );
      },
      20_000,
      'both agents recorded as connected',
    );

    // A crashes (its agent's row stays "connected"), its agent goes away, and A starts again.
    await a.kill9();
    onA.child.kill('SIGKILL');
    await onA.exited;
    const a2 = await start(`ga-${tag}`);
    procs.push(a2);
    const after = await rows();
    expect(after[`gb-agent-${tag}`]?.state).toBe('connected');
    expect(after[`ga-agent-${tag}`]?.state).toBe('gone');
    expect(after[`gb-agent-${tag}`]?.instance).toBe(`gb-${tag}`);

    // The operator's views agree: B's agent is listed as connected there and counted in cluster status.
    const listed = await b.api<{ agents: { id: string; state: string }[] }>('GET', '/api/v1/agents');
    expect(listed.body.agents.map((x) => x.id)).toContain(`gb-agent-${tag}`);
    const res = await runNode([
      ADMIN_BIN,
      '--server',
      a2.url,
      '--token',
      a2.adminToken,
      'cluster',
      'status',
      '--json',
    ]).exited;
    expect(res.code).toBe(0);
    const view = JSON.parse(res.stdout) as { instances: { id: string; agentsConnected: number }[] };
    expect(view.instances.find((i) => i.id === `gb-${tag}`)?.agentsConnected).toBe(1);
  });
});
