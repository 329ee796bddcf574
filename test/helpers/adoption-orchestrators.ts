/**
 * Two orchestrator processes on one fresh PostgreSQL database, for cross-instance adoption of event
 * agents. A configures the event scaler (webhook target: a test HTTP server that records each
 * webhook, and kills the process group of an agent it is told to scale down); B only has an empty
 * scaler file.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { stringify } from 'yaml';
import { afterAll, beforeAll } from 'vitest';
import { eventually, ROOT, runNode } from './orchestrator.js';
import { pidsWithEnv } from './processes.js';
import { freshTestDatabase } from './pg-database.js';

const SECRET = 'event-adoption-secret';
export const SCALER = 'adoptsys';
export const SPAWN_TIMEOUT_MS = 8_000;

export interface Orch {
  id: string;
  url: string;
  wsUrl: string;
  token: string;
  output: () => string;
  stop(): Promise<void>;
}

export interface Hook {
  event: string;
  payload: { agentId: string; claimCode?: string; labels?: string[]; reason?: string };
}

/** The pair a test file runs against: started before its tests, stopped (agents and all) after. */
export interface AdoptionPair {
  readonly a: Orch;
  readonly b: Orch;
  /** A client of the shared database. */
  readonly db: pg.Client;
  readonly databaseUrl: string;
  /** Where A's scaler sends its webhooks. */
  readonly hookUrl: string;
  /** Every webhook received, in order. */
  readonly hooks: Hook[];
  /** The process (group) of each agent a test started, killed on its scale-down and at the end. */
  readonly agentPids: Map<string, number>;
  /** The scale-down webhooks received for this agent. */
  downsFor(agentId: string): Hook[];
}

/** A database of its own on the system tier's PostgreSQL (pg-database.ts), by its URL. */
const freshDatabaseUrl = async (): Promise<string> => (await freshTestDatabase('kici_evadopt')).url;

/** One orchestrator as its own process, in `dir`, on the shared database. */
async function startOrchestrator(
  dir: string,
  databaseUrl: string,
  name: string,
  config: unknown,
): Promise<Orch> {
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

/** The value of the first line of this instance's metrics that `line` matches (0 when none). */
export async function metric(o: Orch, line: RegExp): Promise<number> {
  const text = await (
    await fetch(`${o.url}/metrics`, { headers: { authorization: `Bearer ${o.token}` } })
  ).text();
  const hit = text.split('\n').find((l) => line.test(l));
  return hit ? Number(hit.split(' ').pop()) : 0;
}

/** Start A and B (and the webhook receiver) before the file's tests; stop them after. */
export function adoptionPair(): AdoptionPair {
  let dir = '';
  let databaseUrl = '';
  let db: pg.Client;
  let server: Server;
  let hookUrl = '';
  const hooks: Hook[] = [];
  const agentPids = new Map<string, number>();
  let a: Orch;
  let b: Orch;

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
    a = await startOrchestrator(dir, databaseUrl, 'a', {
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
    b = await startOrchestrator(dir, databaseUrl, 'b', { version: 1, scalers: [] });
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

  return {
    get a() {
      return a;
    },
    get b() {
      return b;
    },
    get db() {
      return db;
    },
    get databaseUrl() {
      return databaseUrl;
    },
    get hookUrl() {
      return hookUrl;
    },
    hooks,
    agentPids,
    downsFor: (agentId) =>
      hooks.filter((h) => h.event === 'kici.scaler.scale-down' && h.payload.agentId === agentId),
  };
}

/** Did this instance log a scale-down it emitted for this agent? */
export const emittedDown = (o: Orch, agentId: string) =>
  o
    .output()
    .split('\n')
    .some((l) => l.includes(agentId) && l.includes('scale-down emitted'));
