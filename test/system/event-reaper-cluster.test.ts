/**
 * The leader's event reaper on three orchestrators sharing one PostgreSQL. The instance holding a
 * registered event agent is killed with SIGKILL: nobody is left to send the agent's scale-down but
 * the leader, which sends exactly one within the bound of docs/event-provisioning-reaper.md. While
 * the leader reaches none of its peers (the third instance is stopped with SIGSTOP, so its
 * heartbeats stop), the partition guard holds and nothing is reaped.
 */
import { spawn as spawnChild } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { MARKER } from '../helpers/leftover-processes.js';
import { AGENT_BIN, NODE, ROOT, alive, eventually, runNode } from '../helpers/orchestrator.js';
import { freshTestDatabase, type TestDatabase } from '../helpers/pg-database.js';

const SECRET = 'event-reaper-cluster-secret';
const HEARTBEAT_MS = 300;
const REAP_INTERVAL_MS = 1_000;
const FLAP_GRACE_MS = 2_000;
/** The documented bound: the holder counts as dead, then one pass starts the clock, one reaps. */
const BOUND_MS = 3 * HEARTBEAT_MS + FLAP_GRACE_MS + 2 * REAP_INTERVAL_MS;
/** Room for a loaded host (process start-up of the webhook delivery, scheduling). */
const SLACK_MS = 3_000;

interface Hook {
  event: string;
  payload: {
    agentId: string;
    claimCode?: string;
    labels?: string[];
    orchestratorUrl?: string;
    reason?: string;
  };
}

interface Orch {
  name: string;
  id: string;
  url: string;
  pid: number;
  token: string;
  output: () => string;
  kill9(): Promise<void>;
  stop(): Promise<void>;
}

let dir = '';
let db: TestDatabase | undefined;
const orchs: Orch[] = [];
const servers: Server[] = [];
const agentPids: number[] = [];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-evreap-'));
});
afterEach(async () => {
  for (const o of orchs.splice(0)) {
    if (alive(o.pid)) process.kill(o.pid, 'SIGCONT');
    await o.stop();
  }
  for (const pid of agentPids.splice(0))
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // gone already (its scale-down killed it)
    }
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
  await db?.drop();
  db = undefined;
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The "cloud": boots a kici-agent for each scale-up, kills its process group on scale-down. */
function cloud() {
  const got: (Hook & { at: number })[] = [];
  const pids = new Map<string, number>();
  const server = createServer((req, res) => {
    let raw = '';
    req.on('data', (d) => (raw += String(d)));
    req.on('end', () => {
      const h = JSON.parse(raw) as Hook;
      got.push({ ...h, at: Date.now() });
      res.end();
      const p = h.payload;
      if (h.event === 'kici.scaler.scale-up' && p.orchestratorUrl) {
        const child = spawnChild(NODE, [AGENT_BIN], {
          detached: true,
          stdio: 'ignore',
          env: {
            PATH: process.env.PATH,
            HOME: process.env.HOME,
            [MARKER]: process.env[MARKER],
            KICI_SCALER_CLAIM_CODE: p.claimCode,
            KICI_AGENT_ID: p.agentId,
            KICI_LABELS: p.labels!.join(','),
            KICI_ORCHESTRATOR_URL: p.orchestratorUrl,
          },
        });
        child.unref();
        if (child.pid) {
          pids.set(p.agentId, child.pid);
          agentPids.push(child.pid);
        }
      } else if (h.event === 'kici.scaler.scale-down') {
        const pid = pids.get(p.agentId);
        if (pid)
          try {
            process.kill(-pid, 'SIGKILL');
          } catch {
            // already gone
          }
      }
    });
  });
  servers.push(server);
  return { got, server };
}

async function startOrchestrator(databaseUrl: string, configPath: string, name: string): Promise<Orch> {
  const script = join(dir, 'orchestrator.mjs');
  await writeFile(
    script,
    `import { Orchestrator } from ${JSON.stringify(join(ROOT, 'dist/server/orchestrator.js'))};
const orch = await Orchestrator.start(JSON.parse(process.env.ORCH_OPTS));
console.log(JSON.stringify({ ready: orch.url, token: orch.adminToken }));
process.on('SIGTERM', () => void orch.stop().then(() => process.exit(0)));
`,
  );
  const opts = {
    port: 0,
    dataDir: await mkdtemp(join(dir, `${name}-`)),
    databaseUrl,
    scalerConfigPath: configPath,
    sweepIntervalMs: 200,
    spawnTimeoutMs: 60_000,
    clusterHeartbeatMs: HEARTBEAT_MS,
    reapIntervalMs: REAP_INTERVAL_MS,
    reapWindows: { flapGraceMs: FLAP_GRACE_MS },
  };
  const id = `evreap-${name}`;
  const child = runNode([script], {
    ORCH_OPTS: JSON.stringify(opts),
    KICI_LOG_LEVEL: 'info',
    KICI_SCALER_WEBHOOK_SECRET: SECRET,
    KICI_INSTANCE_ID: id,
  });
  const ready = await eventually(
    () => /"ready":"(http:[^"]+)","token":"([^"]+)"/.exec(child.output().stdout),
    30_000,
    `${name} ready`,
  );
  const o: Orch = {
    name,
    id,
    url: ready[1]!,
    token: ready[2]!,
    pid: child.child.pid!,
    output: () => child.output().stdout + child.output().stderr,
    async kill9() {
      child.child.kill('SIGKILL');
      await child.exited;
    },
    async stop() {
      if (child.child.exitCode === null && child.child.signalCode === null) child.child.kill('SIGTERM');
      await child.exited;
    },
  };
  orchs.push(o);
  return o;
}

async function api<T>(o: Orch, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${o.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${o.token}`,
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return (await res.json()) as T;
}

async function gauge(o: Orch, name: string): Promise<number | undefined> {
  const res = await fetch(`${o.url}/metrics`, { headers: { authorization: `Bearer ${o.token}` } });
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(await res.text());
  return m ? Number(m[1]) : undefined;
}

/**
 * Three instances: A (started first, so it leads), B, and C, the only one with the event scaler
 * (the others have an empty scaler list, as every coordinator sharing the store must have one), so
 * C provisions the agent and holds it. Returns once the agent has registered with C and its job
 * runs there.
 */
async function clusterWithAgentOnC() {
  db = await freshTestDatabase('evreap');
  const c = cloud();
  await new Promise<void>((r) => c.server.listen(0, '127.0.0.1', r));
  const hook = `http://127.0.0.1:${(c.server.address() as AddressInfo).port}/hook`;
  const empty = join(dir, 'empty.yaml');
  await writeFile(empty, stringify({ version: 1, scalers: [] }));
  const withCloud = join(dir, 'cloud.yaml');
  await writeFile(
    withCloud,
    stringify({
      version: 1,
      scalers: [
        {
          name: 'cloud',
          type: 'event',
          maxAgents: 2,
          labelSets: [{ labels: ['evreap'] }],
          provisioningTargets: [`webhook:${hook}`],
        },
      ],
    }),
  );
  const a = await startOrchestrator(db.url, empty, 'a');
  await eventually(() => a.output().includes('cluster leadership acquired'), 20_000, 'A leads');
  const b = await startOrchestrator(db.url, empty, 'b');
  const holder = await startOrchestrator(db.url, withCloud, 'c');
  const run = await api<{ jobs: { id: string }[] }>(holder, 'POST', '/api/v1/runs', {
    jobs: { work: { runsOn: ['evreap'], steps: [{ run: 'sleep 120' }] } },
  });
  const jobId = run.jobs[0]!.id;
  await eventually(
    async () => (await api<{ state: string }>(holder, 'GET', `/api/v1/jobs/${jobId}`)).state === 'running',
    60_000,
    'the job running on the provisioned agent',
  );
  const up = c.got.find((h) => h.event === 'kici.scaler.scale-up')!;
  const [spawnRow] = await db.query<{ owner_instance_id: string; registered_at: Date | null }>(
    'select owner_instance_id, registered_at from scaler_spawning_agents where agent_id = $1',
    [up.payload.agentId],
  );
  expect(spawnRow?.owner_instance_id).toBe(holder.id);
  expect(spawnRow?.registered_at).not.toBeNull();
  const downs = () =>
    c.got.filter((h) => h.event === 'kici.scaler.scale-down' && h.payload.agentId === up.payload.agentId);
  return { a, b, holder, agentId: up.payload.agentId, downs };
}

describe('the leader reaps the registered event agent of a killed instance (PostgreSQL)', () => {
  it("kill -9 of the holder: exactly one scale-down (heartbeat-timeout) within the bound, recorded as the leader's", async () => {
    const { a, holder, agentId, downs } = await clusterWithAgentOnC();
    expect(downs()).toHaveLength(0);
    const killedAt = Date.now();
    await holder.kill9();
    const [down] = await eventually(() => downs().length > 0 && downs(), BOUND_MS + SLACK_MS, 'a scale-down');
    expect(down!.at - killedAt).toBeLessThanOrEqual(BOUND_MS + SLACK_MS);
    expect(down!.payload.reason).toBe('heartbeat-timeout');
    const [outcome] = await db!.query<{ condemned_by: string; condemned_reason: string }>(
      'select condemned_by, condemned_reason from scaler_provision_outcomes where agent_id = $1',
      [agentId],
    );
    expect(outcome).toEqual({ condemned_by: a.id, condemned_reason: 'heartbeat-timeout' });
    // The reaper sends the scale-down, then revokes the agent's tokens and deletes its rows.
    await eventually(
      async () =>
        (await db!.query('select 1 from scaler_spawning_agents where agent_id = $1', [agentId])).length === 0,
      30_000,
      'the spawn row deleted after the scale-down',
    );
    expect(a.output()).toContain('starting absence clock');
    expect(a.output()).toContain('Reaping stranded event-scaler provision');
    // No second one: the row is gone, so later passes have nothing to act on. Waiting here is
    // the assertion itself (an absence), over two more passes than the bound allows for.
    await new Promise((r) => setTimeout(r, 2 * REAP_INTERVAL_MS + FLAP_GRACE_MS));
    expect(downs()).toHaveLength(1);
  }, 150_000);

  it('no scale-down while the leader sees none of its peers; exactly one once a peer answers again', async () => {
    const { a, b, holder, agentId, downs } = await clusterWithAgentOnC();
    // Cut the leader off: B stops heartbeating (SIGSTOP), C dies.
    process.kill(b.pid, 'SIGSTOP');
    await holder.kill9();
    const cutAt = Date.now();
    await eventually(async () => (await gauge(a, 'kici_orch_scaler_reap_blocked')) === 1, 20_000, 'blocked');
    expect(a.output()).toContain('reaching none of the known peers: no event provision is reaped');
    // Absence is what this asserts: twice the time a reap would have taken, nothing goes out.
    const quiet = 2 * BOUND_MS - (Date.now() - cutAt);
    if (quiet > 0) await new Promise((r) => setTimeout(r, quiet));
    expect(downs()).toHaveLength(0);
    expect(await gauge(a, 'kici_orch_scaler_reap_blocked')).toBe(1);
    expect(
      await db!.query('select 1 from scaler_spawning_agents where agent_id = $1', [agentId]),
    ).toHaveLength(1);

    process.kill(b.pid, 'SIGCONT');
    const resumedAt = Date.now();
    const [down] = await eventually(() => downs().length > 0 && downs(), BOUND_MS + SLACK_MS, 'a scale-down');
    expect(down!.at - resumedAt).toBeLessThanOrEqual(BOUND_MS + SLACK_MS);
    expect(down!.payload.reason).toBe('heartbeat-timeout');
    expect(await gauge(a, 'kici_orch_scaler_reap_blocked')).toBe(0);
    await new Promise((r) => setTimeout(r, 2 * REAP_INTERVAL_MS + FLAP_GRACE_MS));
    expect(downs()).toHaveLength(1);
  }, 150_000);
});
