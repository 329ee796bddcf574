import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN_BIN,
  alive,
  bareMetalConfig,
  eventually,
  runNode,
  writeConfig,
} from '../helpers/orchestrator.js';
import {
  startOrchestratorProcess,
  startStaticAgentProcess,
  type OrchProcess,
} from '../helpers/orch-process.js';
import { freshTestDatabase, type TestDatabase } from '../helpers/pg-database.js';

/**
 * One cluster view: three orchestrators on one PostgreSQL, each with its own agent, B and C with a
 * scaler of their own. `agent list`, `scaler status`, `diagnose` and `cluster status`, all asked of
 * A, show every instance's part, each row naming its instance; once C is killed, its rows are
 * shown as those of a dead instance.
 */

const tag = randomBytes(3).toString('hex');
const id = (n: string) => `v${n}-${tag}`;
let db: TestDatabase;
const orchs: OrchProcess[] = [];
const agents: ReturnType<typeof runNode>[] = [];

beforeAll(async () => {
  db = await freshTestDatabase('clview');
});
afterAll(async () => {
  for (const a of agents) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGTERM');
  await Promise.all(agents.map((a) => a.exited));
  for (const o of orchs) await o.stop();
  await db.drop();
});

interface Marked {
  instance: string;
  instanceState: string;
}
type AgentRow = Marked & { id: string; state: string };
type ScalerRow = Marked & { name: string; backoff: { labelSet: string; consecutiveFailures: number }[] };
interface Diagnosis {
  healthy: boolean;
  scalers: (Marked & { name: string; healthy: boolean })[];
  checks: (Marked & { name: string; status: string })[];
}

/** A scaler whose agent can never start: its label set backs off on the instance that runs it. */
const failing = (name: string) =>
  bareMetalConfig({ name, maxAgents: 2 }, [
    { labels: ['linux', `${name}-${tag}`], binaryPath: '/bin/false' },
  ]);

describe('one cluster view across three orchestrators', () => {
  it('A shows every instance’s agents, scalers, diagnosis and presence; a killed instance shows as dead', async () => {
    const env = { KICI_CLUSTER_HEARTBEAT_MS: '300' };
    for (const n of ['a', 'b', 'c']) {
      const args = ['--instance-id', id(n)];
      if (n !== 'a') args.push('--config', await writeConfig(failing(`s${n}`)));
      orchs.push(await startOrchestratorProcess({ databaseUrl: db.url, env, args }));
    }
    const [a, b, c] = orchs as [OrchProcess, OrchProcess, OrchProcess];
    for (const [o, n] of [
      [a, 'a'],
      [b, 'b'],
      [c, 'c'],
    ] as const)
      agents.push(await startStaticAgentProcess(o, `${id(n)}-agent`, ['linux', `st-${n}-${tag}`]));

    // Only B's scaler can provision this job; its agent never starts, so B backs off.
    const run = await a.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { x: { runsOn: ['linux', `sb-${tag}`], steps: [{ run: 'true' }] } },
    });
    expect(run.status).toBe(201);

    const admin = async (...args: string[]) =>
      (await runNode([ADMIN_BIN, '--server', a.url, '--token', a.adminToken, ...args]).exited) as {
        code: number;
        stdout: string;
        stderr: string;
      };
    const json = async <T>(...args: string[]) => {
      const r = await admin(...args, '--json');
      return { code: r.code, body: JSON.parse(r.stdout) as T };
    };

    // Every agent, each on its own instance (peers' rows arrive with their next heartbeat).
    const listed = await eventually(
      async () => {
        const { body } = await json<AgentRow[]>('agent', 'list');
        return ['a', 'b', 'c'].every((n) => body.some((x) => x.id === `${id(n)}-agent`)) && body;
      },
      20_000,
      'every instance’s agent in the list',
    );
    for (const n of ['a', 'b', 'c'])
      expect(listed.find((x) => x.id === `${id(n)}-agent`)).toMatchObject({
        instance: id(n),
        instanceState: 'alive',
        state: 'idle',
      });
    const text = await admin('agent', 'list');
    expect(text.stdout.split('\n')[0]).toMatch(/LABELS\s+INSTANCE$/);
    expect(text.stdout).toMatch(new RegExp(`^${id('b')}-agent\\s.*\\s${id('b')}$`, 'm'));

    // Scaler status: B's backoff and C's scaler, asked of A, which has no scaler of its own.
    const status = await eventually(
      async () => {
        const { body } = await json<{ configured: boolean; scalers: ScalerRow[]; instances: Marked[] }>(
          'scaler',
          'status',
        );
        const sb = body.scalers.find((s) => s.name === 'sb');
        return sb && sb.backoff.length > 0 && body;
      },
      30_000,
      'B’s backoff in the status A shows',
    );
    expect(status.configured).toBe(true);
    expect(status.scalers.map((s) => [s.name, s.instance, s.instanceState])).toEqual([
      ['sb', id('b'), 'alive'],
      ['sc', id('c'), 'alive'],
    ]);
    expect(status.scalers[0]!.backoff[0]).toMatchObject({ labelSet: `linux,sb-${tag}` });
    expect(status.scalers[1]!.backoff).toEqual([]);
    expect(status.instances.map((i) => i.instance).sort()).toEqual([id('a'), id('b'), id('c')]);
    const statusText = await admin('scaler', 'status');
    expect(statusText.stdout).toMatch(new RegExp(`^sb\\s.*\\s${id('b')}$`, 'm'));

    // Diagnose: B's problem makes the cluster unhealthy (exit 1), though A itself is fine.
    const diag = await json<Diagnosis>('diagnose');
    expect(diag.code).toBe(1);
    expect(diag.body.healthy).toBe(false);
    expect(diag.body.scalers.map((s) => [s.name, s.instance, s.healthy])).toEqual([
      ['sb', id('b'), false],
      ['sc', id('c'), true],
    ]);
    expect((await admin('diagnose')).stdout).toContain(`scaler:sb (bare-metal) on ${id('b')}: PROBLEM`);

    // Drains act where the agent is: A names B for B's agent, and a fleet drain through A names what it left.
    const there = await a.api<{ problems: string[] }>('POST', `/api/v1/agents/${id('b')}-agent/drain`);
    expect(there.status).toBe(409);
    expect(there.body.problems[0]).toContain(`connected to instance ${id('b')}`);
    const fleet = await admin('agent', 'drain', '--all', '--json');
    expect(fleet.code, fleet.stderr).toBe(0);
    expect((JSON.parse(fleet.stdout) as { id: string }[]).map((x) => x.id)).toEqual([`${id('a')}-agent`]);
    expect(fleet.stderr).toContain(`${id('b')}-agent on ${id('b')}`);

    // C dies: cluster status says so, and C's rows stay, marked dead.
    await c.kill9();
    const cluster = await eventually(
      async () => {
        const { body } = await json<{ self: string; instances: { id: string; state: string }[] }>(
          'cluster',
          'status',
        );
        return body.instances.find((i) => i.id === id('c'))?.state === 'dead' && body;
      },
      20_000,
      'C shown dead',
    );
    expect(cluster.self).toBe(id('a'));
    expect(cluster.instances.map((i) => [i.id, i.state])).toEqual([
      [id('a'), 'alive'],
      [id('b'), 'alive'],
      [id('c'), 'dead'],
    ]);
    const after = (await json<AgentRow[]>('agent', 'list')).body;
    expect(after.find((x) => x.id === `${id('c')}-agent`)?.instanceState).toBe('dead');
    expect(after.find((x) => x.id === `${id('b')}-agent`)?.instanceState).toBe('alive');
    const deadStatus = (await json<{ scalers: ScalerRow[] }>('scaler', 'status')).body;
    expect(deadStatus.scalers.find((s) => s.name === 'sc')).toMatchObject({
      instance: id('c'),
      instanceState: 'dead',
    });
    expect((await admin('scaler', 'status')).stdout).toContain(`${id('c')} (dead)`);
    const deadDiag = (await json<Diagnosis>('diagnose')).body;
    expect(deadDiag.checks.find((k) => k.name === `instance:${id('c')}`)).toMatchObject({
      status: 'WARN',
      instanceState: 'dead',
    });
  });
});
