/**
 * Cross-instance adoption of event agents with two orchestrator processes on one PostgreSQL. A
 * configures the event scaler (webhook target: a test HTTP server); B only has an empty scaler
 * file. A real agent provisioned by A registers with B: B adopts it, runs its job and sends the
 * scale-down; A's stale prune forgets the provision without a failure. Then the same agents race to
 * register with both instances: exactly one adopts each.
 */
import { spawn as spawnChild } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { WebSocket } from 'ws';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MARKER } from '../helpers/leftover-processes.js';
import { AGENT_BIN, eventually, NODE, ROOT, runNode } from '../helpers/orchestrator.js';
import { pidsWithEnv } from '../helpers/processes.js';

const ADMIN_URL = process.env.KICI_TEST_DATABASE_URL;
const SECRET = 'event-adoption-secret';
const SCALER = 'adoptsys';
const SPAWN_TIMEOUT_MS = 8_000;

interface Orch {
  id: string;
  url: string;
  wsUrl: string;
  token: string;
  output: () => string;
  stop(): Promise<void>;
}

interface Hook {
  event: string;
  payload: { agentId: string; claimCode?: string; labels?: string[]; reason?: string };
}

let dir = '';
let databaseUrl = '';
let db: pg.Client;
let server: Server;
let hookUrl = '';
const hooks: Hook[] = [];
const agentPids = new Map<string, number>();
let a: Orch;
let b: Orch;

async function freshDatabaseUrl(): Promise<string> {
  if (!ADMIN_URL)
    throw new Error('KICI_TEST_DATABASE_URL is not set: run the system tier (see common brief)');
  const name = `kici_evadopt_${randomBytes(4).toString('hex')}`;
  const client = new pg.Client({ connectionString: ADMIN_URL });
  await client.connect();
  await client.query(`create database ${name}`);
  await client.end();
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  return url.toString();
}

/** One orchestrator as its own process, on the shared database. */
async function startOrchestrator(name: string, config: unknown): Promise<Orch> {
  const script = join(dir, 'orchestrator.mjs');
  await writeFile(
    script,
    `import { Orchestrator } from ${JSON.stringify(join(ROOT, 'dist/server/orchestrator.js'))};
const orch = await Orchestrator.start(JSON.parse(process.env.ORCH_OPTS));
console.log(JSON.stringify({ ready: orch.url }));
process.on('SIGTERM', () => void orch.stop().then(() => process.exit(0)));
`,
  );
  const configPath = join(dir, `${name}.yaml`);
  await writeFile(configPath, stringify(config));
  const dataDir = await mkdtemp(join(dir, `${name}-`));
  const id = `evadopt-${name}`;
  const child = runNode([script], {
    ORCH_OPTS: JSON.stringify({
      port: 0,
      dataDir,
      databaseUrl,
      scalerConfigPath: configPath,
      sweepIntervalMs: 200,
      reapIntervalMs: 300,
      spawnTimeoutMs: SPAWN_TIMEOUT_MS,
    }),
    KICI_LOG_LEVEL: 'info',
    KICI_SCALER_WEBHOOK_SECRET: SECRET,
    KICI_INSTANCE_ID: id,
  });
  const ready = await eventually(
    () => /"ready":"(http:[^"]+)"/.exec(child.output().stdout),
    30_000,
    `${name} ready`,
  );
  const url = ready[1]!;
  return {
    id,
    url,
    wsUrl: `${url.replace('http:', 'ws:')}/ws`,
    token: (await readFile(process.env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim(),
    output: () => child.output().stdout + child.output().stderr,
    async stop() {
      if (child.child.exitCode === null) child.child.kill('SIGTERM');
      await child.exited;
    },
  };
}

async function metric(o: Orch, line: RegExp): Promise<number> {
  const text = await (
    await fetch(`${o.url}/metrics`, { headers: { authorization: `Bearer ${o.token}` } })
  ).text();
  const hit = text.split('\n').find((l) => line.test(l));
  return hit ? Number(hit.split(' ').pop()) : 0;
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-evadopt-'));
  databaseUrl = await freshDatabaseUrl();
  server = createServer((req, res) => {
    let raw = '';
    req.on('data', (d) => (raw += String(d)));
    req.on('end', () => {
      hooks.push(JSON.parse(raw) as Hook);
      res.statusCode = 200;
      res.end();
      const h = hooks.at(-1)!;
      const pid = h.event === 'kici.scaler.scale-down' ? agentPids.get(h.payload.agentId) : undefined;
      if (pid)
        try {
          process.kill(-pid, 'SIGKILL');
        } catch {
          // already exited after its job
        }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  hookUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  a = await startOrchestrator('a', {
    version: 1,
    scalers: [
      {
        name: SCALER,
        type: 'event',
        maxAgents: 10,
        labelSets: [{ labels: ['adopt-sys'] }],
        provisioningTargets: [`webhook:${hookUrl}`],
      },
    ],
  });
  // B does not configure the scaler at all.
  b = await startOrchestrator('b', { version: 1, scalers: [] });
  db = new pg.Client({ connectionString: databaseUrl });
  await db.connect();
}, 90_000);

afterAll(async () => {
  await a?.stop();
  await b?.stop();
  await db?.end().catch(() => undefined);
  await new Promise<void>((r) => server?.close(() => r()));
  for (const pid of agentPids.values())
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // gone
    }
  for (const id of agentPids.keys())
    await eventually(
      async () => (await pidsWithEnv(`KICI_AGENT_ID=${id}`)).length === 0,
      10_000,
      `${id} gone`,
    );
  await rm(dir, { recursive: true, force: true });
});

/** Did this instance log a scale-down it emitted for this agent? */
const emittedDown = (o: Orch, agentId: string) =>
  o
    .output()
    .split('\n')
    .some((l) => l.includes(agentId) && l.includes('scale-down emitted'));

const downsFor = (agentId: string) =>
  hooks.filter((h) => h.event === 'kici.scaler.scale-down' && h.payload.agentId === agentId);

describe('an event agent provisioned by A registers with B (PostgreSQL, two processes)', () => {
  it('B adopts it, runs the job and sends the scale-down; A forgets the provision without a failure', async () => {
    const res = await fetch(`${a.url}/api/v1/runs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${a.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        jobs: { adopted: { runsOn: ['adopt-sys'], steps: [{ run: 'echo ran-adopted' }] } },
      }),
    });
    const jobId = ((await res.json()) as { jobs: { id: string }[] }).jobs[0]!.id;
    const up = await eventually(
      () => hooks.find((h) => h.event === 'kici.scaler.scale-up'),
      30_000,
      'the scale-up webhook',
    );
    const agentId = up.payload.agentId;
    // The "cloud" boots the instance, but its agent is pointed at B, not at A.
    const child = spawnChild(NODE, [AGENT_BIN], {
      detached: true,
      stdio: 'ignore',
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        [MARKER]: process.env[MARKER],
        KICI_SCALER_CLAIM_CODE: up.payload.claimCode,
        KICI_AGENT_ID: agentId,
        KICI_LABELS: up.payload.labels!.join(','),
        KICI_ORCHESTRATOR_URL: b.wsUrl,
        KICI_SCALER_MANAGED: '1',
      },
    });
    child.unref();
    agentPids.set(agentId, child.pid!);

    const job = await eventually(
      async () => {
        const r = await db.query(`select state, agent_id, owner_instance from jobs where id = $1`, [jobId]);
        const row = r.rows[0] as { state: string; agent_id: string; owner_instance: string };
        return ['succeeded', 'failed', 'cancelled', 'no-backend'].includes(row.state) && row;
      },
      60_000,
      'the job finished',
    );
    expect(job).toMatchObject({ state: 'succeeded', agent_id: agentId, owner_instance: b.id });
    await eventually(() => downsFor(agentId).length > 0, 20_000, 'the scale-down');
    expect(downsFor(agentId)[0]!.payload.reason).toBe('job-complete');
    // B sent it, not A. B counts it once the webhook answered, which is after the receiver saw it.
    const downLine = new RegExp(`^kici_orch_scaler_scale_down_emitted_total\\{scaler="${SCALER}"`);
    await eventually(async () => (await metric(b, downLine)) === 1, 10_000, 'B counts the scale-down');
    expect(await metric(a, downLine)).toBe(0);
    expect(b.output()).toContain('adopted an event agent spawned by another orchestrator');
    const outcome = await db.query(`select adopted_by from scaler_provision_outcomes where agent_id = $1`, [
      agentId,
    ]);
    expect(outcome.rows).toEqual([{ adopted_by: b.id }]);
    expect(
      (await db.query(`select 1 from scaler_spawning_agents where agent_id = $1`, [agentId])).rowCount,
    ).toBe(0);

    // A's prune runs a spawn deadline after the provision: it forgets it, and reports nothing.
    await eventually(
      () => a.output().includes('provision adopted by a peer; forgotten here'),
      SPAWN_TIMEOUT_MS + 15_000,
      "A's prune",
    );
    await new Promise((r) => setTimeout(r, 1_000));
    expect(a.output()).not.toContain('Scaler spawn failed');
    expect(await metric(a, /^kici_orch_scaler_external_provision_timeout_total\{/)).toBe(0);
    expect(downsFor(agentId)).toHaveLength(1);
    const again = await db.query(`select state, attempts from jobs where id = $1`, [jobId]);
    expect(again.rows[0].state).toBe('succeeded');
  }, 120_000);
});

interface Attempt {
  who: string;
  acked: boolean;
  code?: number;
  reason?: string;
  ws: WebSocket;
}

/** One registration over a plain WebSocket: acked (left open) or refused (closed). */
function register(o: Orch, agentId: string, token: string, labels: string[]): Promise<Attempt> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(o.wsUrl);
    ws.on('error', reject);
    ws.on('open', () =>
      ws.send(JSON.stringify({ type: 'register', agentId, token, labels, version: '0.0.0-test' })),
    );
    ws.on('message', (raw) => {
      const m = JSON.parse(String(raw)) as { type: string };
      if (m.type === 'register.ack') resolve({ who: o.id, acked: true, ws });
    });
    ws.on('close', (code, reason) => resolve({ who: o.id, acked: false, code, reason: String(reason), ws }));
  });
}

describe('the same agent presenting itself to both instances', () => {
  it('property over 8 provisions: exactly one instance adopts each; the gate comes from the row; the adopter alone tears it down', async () => {
    const { openDatabase, createStore } = await import('../../src/store/index.js');
    const { StoreClaimStore } = await import('../../src/scaler/claim-store.js');
    const { systemClock } = await import('../../src/util/clock.js');
    const opened = await openDatabase({ url: databaseUrl });
    try {
      const issuer = new StoreClaimStore(createStore(opened.db), systemClock, {
        scalerName: SCALER,
        claimTtlSeconds: 300,
      });
      const winners = new Map<string, Attempt>();
      const tokens = new Map<string, string>();
      for (let i = 0; i < 8; i++) {
        const agentId = `scaler-event-race${String(i).padStart(4, '0')}`;
        const labels = ['adopt-gate', 'adopt-sys', 'kici:agent:event', `kici:scaler:${SCALER}`];
        await db.query(
          `insert into scaler_spawning_agents (agent_id, scaler_name, backend_type, peer_adoptable, label_set,
             owner_instance_id, backend_ref, mandatory_labels, provisioning_targets)
           values ($1, $2, 'event', true, '["adopt-sys"]', $3, $1, '["adopt-gate"]', $4)`,
          [agentId, SCALER, a.id, JSON.stringify([`webhook:${hookUrl}`])],
        );
        const code = await issuer.register({
          agentId,
          labels,
          agentTokenTtlSeconds: 600,
          orchestratorUrl: a.wsUrl,
        });
        const claimed = (await (
          await fetch(`${a.url}/scaler/claim`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ claimCode: code, agentId }),
          })
        ).json()) as { agentToken: string };
        // The agent also presents a self-reported label; its gate still comes from the row.
        const shown = [...labels, 'kici:os:linux'];
        const order = i % 2 ? [a, b] : [b, a];
        const tries = await Promise.all(order.map((o) => register(o, agentId, claimed.agentToken, shown)));
        const acked = tries.filter((t) => t.acked);
        expect(acked, JSON.stringify(tries.map((t) => [t.who, t.acked, t.code, t.reason]))).toHaveLength(1);
        const loser = tries.find((t) => !t.acked)!;
        // The loser is refused by whichever gate it reaches first: the adoption row (4403), or the
        // live session the winner already holds for this agent id cluster-wide (4412).
        if (loser.code === 4403)
          expect(loser.reason).toContain(`already adopted by orchestrator "${acked[0]!.who}"`);
        else {
          expect(loser.code).toBe(4412);
          expect(loser.reason).toContain('session refused');
        }
        winners.set(agentId, acked[0]!);
        tokens.set(agentId, claimed.agentToken);
        const row = await db.query(`select adopted_by from scaler_spawning_agents where agent_id = $1`, [
          agentId,
        ]);
        expect(row.rows[0].adopted_by).toBe(acked[0]!.who);
      }
      expect(new Set([...winners.values()].map((w) => w.who)).size).toBe(2);

      // The row's gate: a job without `adopt-gate` is never given to the adopted agent; one with it is.
      const [firstId, first] = [...winners.entries()][0]!;
      const host = first.who === a.id ? a : b;
      // Every adopted agent on that instance could take the job: listen on all of them.
      const assigned: string[] = [];
      for (const w of winners.values())
        w.ws.on('message', (raw) => {
          const m = JSON.parse(String(raw)) as { type: string; job?: { id?: string } };
          if (m.type === 'job.assign') assigned.push(m.job?.id ?? '?');
        });
      const submit = async (runsOn: string[]) => {
        const r = await fetch(`${host.url}/api/v1/runs`, {
          method: 'POST',
          headers: { authorization: `Bearer ${host.token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ jobs: { g: { runsOn, steps: [{ run: 'true' }] } } }),
        });
        return ((await r.json()) as { jobs: { id: string }[] }).jobs[0]!.id;
      };
      await submit(['adopt-sys']);
      await new Promise((r) => setTimeout(r, 2_000));
      expect(assigned).toEqual([]);
      const gated = await submit(['adopt-sys', 'adopt-gate']);
      await eventually(() => assigned.length === 1, 15_000, 'the gated job assigned');
      expect(assigned).toEqual([gated]);

      // Each adopter tears its agents down when they leave; the other instance never does.
      for (const w of winners.values()) w.ws.close();
      for (const [agentId, w] of winners) {
        // The adopter logs the scale-down once the webhook answered: after the receiver saw it.
        await eventually(
          () => downsFor(agentId).length > 0 && emittedDown(w.who === a.id ? a : b, agentId),
          20_000,
          `${agentId} scale-down, logged by its adopter`,
        );
        expect(emittedDown(w.who === a.id ? b : a, agentId), `${agentId} by the other`).toBe(false);
      }
      await new Promise((r) => setTimeout(r, 1_000));
      for (const agentId of winners.keys()) expect(downsFor(agentId)).toHaveLength(1);
      expect(firstId).toMatch(/^scaler-event-race/);

      // Coming back afterwards, to either instance, with its own token, is refused: no second adopter.
      for (const [agentId, w] of [...winners].slice(0, 2)) {
        for (const o of w.who === a.id ? [b, a] : [a, b]) {
          const back = await register(o, agentId, tokens.get(agentId)!, ['adopt-sys']);
          expect(back.acked, `${agentId} back on ${o.id}`).toBe(false);
        }
      }
      const outcomes = await db.query(
        `select agent_id, adopted_by from scaler_provision_outcomes where agent_id like 'scaler-event-race%'`,
      );
      expect(outcomes.rows).toHaveLength(8);
      for (const r of outcomes.rows as { agent_id: string; adopted_by: string }[])
        expect(r.adopted_by).toBe(winners.get(r.agent_id)!.who);
    } finally {
      await opened.close();
    }
  }, 120_000);
});
