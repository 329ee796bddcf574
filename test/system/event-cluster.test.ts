/**
 * Event scalers on one PostgreSQL shared by two orchestrator processes: the cluster-wide cap holds
 * at every instant, and only the leader's reaper reaps. Also the cap lock itself, taken
 * by concurrent callers in two processes.
 */
import { spawn as spawnChild } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MARKER } from '../helpers/leftover-processes.js';
import { AGENT_BIN, eventually, NODE, ROOT, runNode } from '../helpers/orchestrator.js';
import { pidsWithEnv } from '../helpers/processes.js';
import { freshTestDatabase } from '../helpers/pg-database.js';

const SECRET = 'event-cluster-secret';

/** A database of its own on the system tier's PostgreSQL (pg-database.ts), by its URL. */
const freshDatabaseUrl = async (): Promise<string> => (await freshTestDatabase('kici_evcluster')).url;

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-evcluster-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('withScalerCapLock across processes (PostgreSQL)', () => {
  it('concurrent callers in two processes never reserve more than maxAgents, and fill it', async () => {
    const url = await freshDatabaseUrl();
    // Migrate once before the race, so both workers only race for the lock.
    const { openDatabase } = await import('../../src/store/index.js');
    await (await openDatabase({ url })).close();
    const worker = join(dir, 'cap-worker.mjs');
    await writeFile(
      worker,
      `import { openDatabase } from ${JSON.stringify(join(ROOT, 'dist/store/open.js'))};
import { reserveEventSpawn } from ${JSON.stringify(join(ROOT, 'dist/scaler/event-cap.js'))};
const [url, who, startAt] = process.argv.slice(2);
const db = await openDatabase({ url });
while (Date.now() < Number(startAt)) await new Promise((r) => setTimeout(r, 2));
const out = await Promise.all(Array.from({ length: 8 }, (_, i) =>
  reserveEventSpawn(db.db, { name: 'race', maxAgents: 3 }, {
    agentId: 'scaler-event-' + who + i, scalerName: 'race', backendType: 'event', labelSet: ['x'],
    runId: null, boundJobId: 'j-' + who + i, ownerInstanceId: who, mandatoryLabels: [], spawnedAt: new Date(),
  }, { cpus: 0, memBytes: 0 })));
console.log(JSON.stringify({ granted: out.filter((o) => o === undefined).length }));
await db.close();
`,
    );
    const startAt = String(Date.now() + 1_500);
    const runs = await Promise.all(['a', 'b'].map((who) => runNode([worker, url, who, startAt]).exited));
    const granted = runs.map((r) => {
      expect(r.code, r.stderr).toBe(0);
      return (JSON.parse(r.stdout.trim()) as { granted: number }).granted;
    });
    expect(granted[0]! + granted[1]!).toBe(3);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    const rows = await client.query(
      `select count(*)::int as n from scaler_spawning_agents where scaler_name = 'race'`,
    );
    await client.end();
    expect(rows.rows[0].n).toBe(3);
  }, 60_000);
});

interface Orch {
  url: string;
  token: string;
  output: () => string;
  stop(): Promise<void>;
}

/** One orchestrator as its own process, on the shared database. */
async function startOrchestrator(databaseUrl: string, configPath: string, name: string): Promise<Orch> {
  const script = join(dir, 'orchestrator.mjs');
  await writeFile(
    script,
    `import { Orchestrator } from ${JSON.stringify(join(ROOT, 'dist/server/orchestrator.js'))};
const orch = await Orchestrator.start(JSON.parse(process.env.ORCH_OPTS));
console.log(JSON.stringify({ ready: orch.url }));
process.on('SIGTERM', () => void orch.stop().then(() => process.exit(0)));
`,
  );
  const dataDir = await mkdtemp(join(dir, `${name}-`));
  const opts = {
    port: 0,
    dataDir,
    databaseUrl,
    scalerConfigPath: configPath,
    sweepIntervalMs: 200,
    reapIntervalMs: 300,
    // The orphan below is reaped two passes after the leader first misses it.
    reapWindows: { flapGraceMs: 0 },
    spawnTimeoutMs: 30_000,
  };
  const child = runNode([script], {
    ORCH_OPTS: JSON.stringify(opts),
    KICI_LOG_LEVEL: 'info',
    KICI_SCALER_WEBHOOK_SECRET: SECRET,
    KICI_INSTANCE_ID: `evcluster-${name}`,
  });
  const ready = await eventually(
    () => /"ready":"(http:[^"]+)"/.exec(child.output().stdout),
    30_000,
    `${name} ready`,
  );
  return {
    url: ready[1]!,
    token: (await readFile(process.env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim(),
    output: () => child.output().stdout + child.output().stderr,
    async stop() {
      if (child.child.exitCode === null) child.child.kill('SIGTERM');
      await child.exited;
    },
  };
}

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

/** The "cloud": boots a kici-agent for each scale-up, kills its process group on scale-down. */
function cloud() {
  const got: Hook[] = [];
  const pids = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    let raw = '';
    req.on('data', (d) => (raw += String(d)));
    req.on('end', () => {
      const h = JSON.parse(raw) as Hook;
      got.push(h);
      res.statusCode = 200;
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
            KICI_SCALER_MANAGED: '1',
          },
        });
        child.unref();
        if (child.pid) pids.set(p.agentId, child.pid);
      } else if (h.event === 'kici.scaler.scale-down') {
        const pid = pids.get(p.agentId);
        if (pid)
          try {
            process.kill(-pid, 'SIGKILL');
          } catch {
            // already exited after its job
          }
      }
    });
  });
  return { got, pids, server };
}

describe('two orchestrators sharing one event scaler (PostgreSQL)', () => {
  it('10 jobs across both: never more than maxAgents 3 provisions live, and only one instance reaps', async () => {
    const databaseUrl = await freshDatabaseUrl();
    const c = cloud();
    await new Promise<void>((r) => c.server.listen(0, '127.0.0.1', r));
    const hook = `http://127.0.0.1:${(c.server.address() as AddressInfo).port}/hook`;
    const configPath = join(dir, 'scalers.yaml');
    await writeFile(
      configPath,
      stringify({
        version: 1,
        scalers: [
          {
            name: 'cloud',
            type: 'event',
            maxAgents: 3,
            labelSets: [{ labels: ['evcluster'] }],
            provisioningTargets: [`webhook:${hook}`],
          },
        ],
      }),
    );
    const db = new pg.Client({ connectionString: databaseUrl });
    const orchs: Orch[] = [];
    let sampling = true;
    try {
      orchs.push(await startOrchestrator(databaseUrl, configPath, 'one'));
      orchs.push(await startOrchestrator(databaseUrl, configPath, 'two'));
      await db.connect();
      // Sample the shared spawn rows all along.
      let maxRows = 0;
      const sampler = (async () => {
        while (sampling) {
          const r = await db.query(
            `select count(*)::int as n from scaler_spawning_agents where scaler_name = 'cloud' and backend_type = 'event'`,
          );
          maxRows = Math.max(maxRows, r.rows[0].n as number);
          await new Promise((res) => setTimeout(res, 15));
        }
      })();
      const jobIds: { orch: Orch; id: string }[] = [];
      for (const [i, o] of orchs.entries()) {
        const token = o.token;
        const res = await fetch(`${o.url}/api/v1/runs`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            jobs: Object.fromEntries(
              Array.from({ length: 5 }, (_, k) => [
                `j${i}${k}`,
                { runsOn: ['evcluster'], steps: [{ run: 'sleep 0.3' }] },
              ]),
            ),
          }),
        });
        const body = (await res.json()) as { jobs: { id: string }[] };
        for (const j of body.jobs) jobIds.push({ orch: o, id: j.id });
      }
      for (const { orch, id } of jobIds) {
        const token = orch.token;
        const state = await eventually(
          async () => {
            const r = await fetch(`${orch.url}/api/v1/jobs/${id}`, {
              headers: { authorization: `Bearer ${token}` },
            });
            const j = (await r.json()) as { state: string };
            return (
              ['succeeded', 'failed', 'cancelled', 'timed-out', 'no-backend'].includes(j.state) && j.state
            );
          },
          120_000,
          `job ${id}`,
        );
        expect(state).toBe('succeeded');
      }
      sampling = false;
      await sampler;
      // The emitter log (every delivery row, written as each event is emitted): provisions live at once.
      const rows = await db.query(
        `select agent_id, event_name, created_at from scaler_event_deliveries order by created_at, event_name desc`,
      );
      let live = 0;
      let maxLive = 0;
      for (const r of rows.rows as { event_name: string }[]) {
        live += r.event_name === 'kici.scaler.scale-up' ? 1 : -1;
        maxLive = Math.max(maxLive, live);
      }
      const ups = (rows.rows as { event_name: string }[]).filter(
        (r) => r.event_name === 'kici.scaler.scale-up',
      );
      expect(ups).toHaveLength(10);
      expect(maxLive).toBeLessThanOrEqual(3);
      expect(maxRows).toBeLessThanOrEqual(3);
      // The cap was reached: both orchestrators competed for it.
      expect(maxRows).toBe(3);

      // An orphan provision (its owner is gone): only the lease holder tears it down.
      await db.query(
        `insert into scaler_spawning_agents (agent_id, scaler_name, backend_type, peer_adoptable, label_set, owner_instance_id, mandatory_labels, spawned_at)
         values ('scaler-event-0rphan00', 'cloud', 'event', true, '["evcluster"]', 'evcluster-gone', '[]', now() - interval '1 hour')`,
      );
      await eventually(
        () =>
          c.got.some(
            (h) => h.event === 'kici.scaler.scale-down' && h.payload.agentId === 'scaler-event-0rphan00',
          ),
        20_000,
        'the orphan reaped',
      );
      await new Promise((r) => setTimeout(r, 1_000));
      const downs = c.got.filter(
        (h) => h.event === 'kici.scaler.scale-down' && h.payload.agentId === 'scaler-event-0rphan00',
      );
      expect(downs).toHaveLength(1);
      expect(downs[0]!.payload.reason).toBe('spawn-timeout');
      const leases = orchs.map((o) => o.output().includes('this orchestrator holds the event reaper lease'));
      const reapers = orchs.map((o) => o.output().includes('scaler-event-0rphan00'));
      expect(leases.filter(Boolean)).toHaveLength(1);
      expect(reapers).toEqual(leases);
    } finally {
      sampling = false;
      for (const o of orchs) await o.stop();
      await db.end().catch(() => undefined);
      await new Promise<void>((r) => c.server.close(() => r()));
      for (const pid of c.pids.values()) {
        try {
          process.kill(-pid, 'SIGKILL');
        } catch {
          // gone
        }
      }
    }
    for (const id of c.pids.keys())
      await eventually(
        async () => (await pidsWithEnv(`KICI_AGENT_ID=${id}`)).length === 0,
        10_000,
        `${id} gone`,
      );
  }, 240_000);
});
