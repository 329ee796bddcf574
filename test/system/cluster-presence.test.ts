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
 * Instance identity and presence: two orchestrator processes on one PostgreSQL each heartbeat their
 * row; `kici-admin cluster status` lists both with address, liveness, agents and running jobs; a
 * killed instance turns dead after its grace, a stopped one says so.
 */

const HEARTBEAT_MS = 300;
let db: TestDatabase;
const orchs: OrchProcess[] = [];
const agents: ReturnType<typeof runNode>[] = [];
const tag = randomBytes(3).toString('hex');

beforeAll(async () => {
  db = await freshTestDatabase('clpresence');
});
afterAll(async () => {
  for (const a of agents) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGKILL');
  await Promise.all(agents.map((a) => a.exited));
  for (const o of orchs) await o.stop();
  await db.drop();
});

interface StatusJson {
  self: string;
  instances: {
    id: string;
    address: string;
    state: string;
    leader: boolean;
    agentsConnected: number;
    jobsRunning: number;
    heartbeatAgeMs: number;
  }[];
}

async function admin(o: OrchProcess, ...args: string[]) {
  const r = await runNode([ADMIN_BIN, '--server', o.url, '--token', o.adminToken, ...args]).exited;
  if (r.code !== 0) throw new Error(`kici-admin ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return r.stdout;
}

describe('cluster presence on PostgreSQL', () => {
  it('lists every instance with its facts, and tells a killed one from a stopped one', async () => {
    const env = { KICI_CLUSTER_HEARTBEAT_MS: String(HEARTBEAT_MS) };
    const a = await startOrchestratorProcess({
      databaseUrl: db.url,
      env,
      args: ['--instance-id', `pa-${tag}`],
    });
    orchs.push(a);
    const b = await startOrchestratorProcess({
      databaseUrl: db.url,
      env: { ...env, KICI_INSTANCE_ID: `pb-${tag}` },
    });
    orchs.push(b);
    agents.push(await startStaticAgentProcess(b, `presence-${tag}`, ['linux', 'presence']));

    const status = await eventually(
      async () => {
        const s = JSON.parse(await admin(a, 'cluster', 'status', '--json')) as StatusJson;
        const bRow = s.instances.find((i) => i.id === `pb-${tag}`);
        return bRow?.agentsConnected === 1 ? s : undefined;
      },
      10_000,
      'B reports its agent',
    );
    expect(status.self).toBe(`pa-${tag}`);
    expect(status.instances.map((i) => [i.id, i.address, i.state, i.agentsConnected])).toEqual([
      [`pa-${tag}`, a.url, 'alive', 0],
      [`pb-${tag}`, b.url, 'alive', 1],
    ]);
    for (const i of status.instances) expect(i.heartbeatAgeMs).toBeLessThan(3 * HEARTBEAT_MS);

    const text = await admin(a, 'cluster', 'status');
    expect(text).toMatch(new RegExp(`^pa-${tag} \\(this\\)\\s+${a.url.replace(/\./g, '\\.')}\\s+alive`, 'm'));
    expect(text).toMatch(new RegExp(`^pb-${tag}\\s+\\S+\\s+alive\\s+no\\s+\\S+ ago\\s+1\\s+0`, 'm'));

    // A crash leaves the row behind; its heartbeat ages past 3 intervals and it reads as dead.
    await b.kill9();
    const killedAt = Date.now();
    await eventually(
      async () => {
        const s = JSON.parse(await admin(a, 'cluster', 'status', '--json')) as StatusJson;
        return s.instances.find((i) => i.id === `pb-${tag}`)?.state === 'dead';
      },
      10_000,
      'B dead',
    );
    expect(Date.now() - killedAt).toBeGreaterThanOrEqual(2 * HEARTBEAT_MS);

    await a.stop();
    const rows = await db.query<{ id: string; stopped: boolean }>(
      'select id, stopped_at is not null as stopped from kici_instances order by id',
    );
    expect(rows).toEqual([
      { id: `pa-${tag}`, stopped: true },
      { id: `pb-${tag}`, stopped: false },
    ]);
  });

  it('a bad --instance-id stops start-up with a message naming the flag', async () => {
    const r = await startOrchestratorProcess({
      databaseUrl: db.url,
      args: ['--instance-id', 'no spaces'],
    }).then(
      () => 'started',
      (err: Error) => err.message,
    );
    expect(r).toMatch(/--instance-id: "no spaces" is not a valid instance id/);
    expect(r).not.toMatch(/\n\s+at /); // no stack trace for operators
  });
});
