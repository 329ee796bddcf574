/**
 * `POST /api/v1/scaler/simulate`: the dashboard's what-if. The store's trace of the last `since`
 * is replayed against the running scaler config and a proposed one (YAML pasted by an admin), in a
 * worker thread so a long trace does not hold up the orchestrator's event loop.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Hono } from 'hono';
import { loadScalerConfigForPeople, type ScalerConfig } from '../config/index.js';
import type { RunOptions } from '../scaler/sim/report.js';
import { spawnLatencyFromMetrics } from '../scaler/sim/spawn-latency.js';
import { missingSpawnTime, type WhatIfInput, type WhatIfResult } from '../scaler/sim/what-if.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import { parseDurationMs } from '../util/duration.js';
import { readTrace } from './trace-route.js';
import { readTraceSamples } from './trace-samples-query.js';

/** The compiled worker, found from the package root (dist/server → two levels up) as in tests. */
const WORKER = join(
  dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  'dist',
  'scaler',
  'sim',
  'what-if-worker.js',
);
/** A trace held in memory and sent to the worker: about 200 bytes a job. */
export const MAX_SIM_JOBS = 500_000;
const MAX_SINCE_MS = 90 * 86_400_000;
const MAX_YAML_BYTES = 256 * 1024;
const TIMEOUT_MS = 120_000;

export interface SimulateRouteDeps {
  store: Store;
  clock: Clock;
  /** The config the scalers run now (absent when none is configured). */
  currentConfig: () => ScalerConfig | undefined;
  /** The Prometheus exposition, for spawn times the server measured. */
  metricsText: () => Promise<string>;
}

type Body = Record<string, unknown>;
const bad = (problems: string[]) => ({ error: 'bad request', problems });

export function registerSimulateRoute(app: Hono, deps: SimulateRouteDeps): void {
  let running = false;
  app.post('/api/v1/scaler/simulate', async (c) => {
    // A body that is not JSON reads as undefined and is answered just below with a 400 naming
    // `body`: nothing is lost by not keeping the parser's message.
    const body = (await c.req.json().catch(() => undefined)) as unknown;
    if (typeof body !== 'object' || body === null || Array.isArray(body))
      return c.json(bad(['body: must be a JSON object with "proposed" (scaler config YAML)']), 400);
    const b = body as Body;
    const parsed = await parseRequest(b, deps);
    if ('problems' in parsed) return c.json(bad(parsed.problems), 400);
    if (running)
      return c.json({ error: 'busy', problems: ['a simulation is already running; try again shortly'] }, 429);
    running = true;
    try {
      const from = new Date(deps.clock.now() - parsed.sinceMs);
      const trace = await readTrace(deps.store, from, MAX_SIM_JOBS);
      // About a provision a job.
      const samples = trace && (await readTraceSamples(deps.store, from, 2 * MAX_SIM_JOBS));
      if (!trace || !samples) {
        return c.json(
          bad([
            `since: the last ${parsed.since} hold more than ${MAX_SIM_JOBS} jobs; choose a shorter window`,
          ]),
          400,
        );
      }
      // The spawns and releases the trace shows win over the server's mean spawn time.
      const input = { ...parsed.input, opts: { ...parsed.input.opts, samples } };
      const missing = missingSpawnTime(input);
      if (missing) return c.json(bad([spawnProblem(missing)]), 400);
      const result = await runInWorker({ ...input, trace });
      return c.json({ since: parsed.since, jobs: trace.length, ...result });
    } finally {
      running = false;
    }
  });
}

interface Parsed {
  since: string;
  sinceMs: number;
  input: Omit<WhatIfInput, 'trace'>;
}

async function parseRequest(b: Body, deps: SimulateRouteDeps): Promise<Parsed | { problems: string[] }> {
  const problems: string[] = [];
  const since = b.since ?? '7d';
  const sinceMs = typeof since === 'string' ? parseDurationMs(since) : undefined;
  if (sinceMs === undefined || sinceMs <= 0 || sinceMs > MAX_SINCE_MS)
    problems.push(`since: ${JSON.stringify(since)} is not a duration up to 90d; use e.g. 12h, 7d`);
  const opts: RunOptions = { spawnMs: {} };
  for (const field of ['releaseMs', 'agentIdleMs', 'dispatchMs'] as const) {
    const v = b[field];
    if (v === undefined) continue;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0)
      problems.push(`${field}: must be a number of milliseconds >= 0`);
    else opts[field] = v;
  }
  const spawn = b.spawnMs;
  if (spawn !== undefined) {
    const ok =
      typeof spawn === 'object' &&
      spawn !== null &&
      !Array.isArray(spawn) &&
      Object.values(spawn).every((v) => typeof v === 'number' && Number.isFinite(v) && v >= 0);
    if (!ok) problems.push('spawnMs: must map a backend type or scaler name to milliseconds >= 0');
    else opts.spawnMs = spawn as Record<string, number>;
  }
  if (typeof b.proposed !== 'string' || b.proposed.trim() === '')
    problems.push('proposed: required, the proposed scaler config as YAML text');
  else if (Buffer.byteLength(b.proposed) > MAX_YAML_BYTES)
    problems.push(`proposed: longer than ${MAX_YAML_BYTES / 1024} KiB`);
  const known = new Set(['proposed', 'since', 'spawnMs', 'releaseMs', 'agentIdleMs', 'dispatchMs']);
  for (const k of Object.keys(b)) if (!known.has(k)) problems.push(`${k}: unknown field`);
  if (problems.length) return { problems };
  const proposed = await parseYaml(b.proposed as string);
  if (!proposed.ok) return { problems: proposed.problems.map((p) => `proposed: ${p}`) };
  // Spawn times the server measured fill in where neither the request nor the trace has one.
  opts.defaultSpawnMs = spawnLatencyFromMetrics(await deps.metricsText());
  const input = { proposed: proposed.config, current: deps.currentConfig(), opts };
  return { since: since as string, sinceMs: sinceMs!, input };
}

const spawnProblem = (missing: string) =>
  `spawnMs: ${missing.replace(/pass --spawn-ms .*$/, 'give spawnMs')}`;

/** The loader people get from the CLI, on a private copy of the text; problems name its lines. */
async function parseYaml(
  text: string,
): Promise<{ ok: true; config: ScalerConfig } | { ok: false; problems: string[] }> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-what-if-'));
  try {
    const file = join(dir, 'proposed.yaml');
    await writeFile(file, text, { mode: 0o600 });
    const loaded = await loadScalerConfigForPeople(file);
    if (loaded.ok) return { ok: true, config: loaded.config };
    return { ok: false, problems: loaded.problems.map((p) => p.split(`${dir}/`).join('')) };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function runInWorker(input: WhatIfInput): Promise<WhatIfResult> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(WORKER, { workerData: input });
    const timer = setTimeout(() => {
      void worker.terminate();
      reject(new Error(`the simulation took longer than ${TIMEOUT_MS / 1000} s`));
    }, TIMEOUT_MS);
    worker.once('message', (r: WhatIfResult) => {
      clearTimeout(timer);
      resolve(r);
      void worker.terminate();
    });
    worker.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}
