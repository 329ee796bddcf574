import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { pino } from 'pino';
import { stringify } from 'yaml';
import { Orchestrator, type OrchestratorOptions } from '../../src/server/orchestrator.js';
import { memoryDatabase } from './data-dir.js';
import { tempDir } from './temp-dirs.js';

export const ROOT = resolve(import.meta.dirname, '../..');
export const AGENT_BIN = join(ROOT, 'dist/cli/agent.js');
export const ADMIN_BIN = join(ROOT, 'dist/cli/admin.js');
export const ORCH_BIN = join(ROOT, 'dist/cli/orchestrator.js');
/** Node 24 from the devDependency, whatever node runs the test runner. */
export const NODE = join(ROOT, 'node_modules/.bin/node');

export interface TestOrchestrator {
  orch: Orchestrator;
  dataDir: string;
  api<T = unknown>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }>;
  waitForJob(jobId: string, states?: string[], timeoutMs?: number): Promise<JobBody>;
  stop(): Promise<void>;
}

export interface JobBody {
  id: string;
  state: string;
  exitCode: number | null;
  reason: string | null;
  waiting: string | null;
  agentId: string | null;
  lastProvisioningError: string | null;
  startedAt: string | null;
  createdAt: string;
}

const FINAL = ['succeeded', 'failed', 'cancelled', 'timed-out', 'no-backend'];

/**
 * A process-mode label set with no security key of its own gets `trust: host`: these tests are about
 * scheduling, not confinement, and run on hosts where the confined default would differ (per-agent
 * users as root, the sandbox otherwise). Tests of confinement set their own keys.
 */
export function trustedHost(ls: unknown): unknown {
  if (typeof ls !== 'object' || ls === null || Array.isArray(ls)) return ls;
  const set = ls as {
    binaryPath?: unknown;
    runAsUser?: unknown;
    trust?: unknown;
    env?: Record<string, string>;
  };
  if (!set.binaryPath || set.runAsUser || set.trust || set.env?.KICI_SANDBOX) return ls;
  return { ...set, trust: 'host' };
}

/** A bare-metal scaler config pointing at the built agent. */
export function bareMetalConfig(over: Record<string, unknown> = {}, labelSets?: unknown[]) {
  return {
    version: 1,
    globalMaxAgents: 10,
    scalers: [
      {
        name: 'bm',
        type: 'bare-metal',
        maxAgents: 4,
        labelSets: (
          labelSets ?? [
            { labels: ['linux', 'small'], binaryPath: AGENT_BIN },
            { labels: ['linux', 'large'], binaryPath: AGENT_BIN },
          ]
        ).map(trustedHost),
        ...over,
      },
    ],
  };
}

export async function writeConfig(config: unknown): Promise<string> {
  const dir = await tempDir('kici-cfg-');
  const path = join(dir, 'scalers.yaml');
  await writeFile(path, stringify(config));
  return path;
}

/**
 * A real orchestrator on an ephemeral port. Given a `dataDir` (or a `databaseUrl`), it uses that
 * store; else its data dir is an empty temporary one and its embedded database is held in memory,
 * loaded from the migrated template (no initdb, no copy of the files).
 */
export async function startTestOrchestrator(
  opts: Partial<OrchestratorOptions> & { config?: unknown; dataDir?: string } = {},
): Promise<TestOrchestrator> {
  const inMemory = !opts.dataDir && !opts.databaseUrl && !opts.database;
  const [dataDir, database] = await Promise.all([
    opts.dataDir ?? mkdtemp(join(tmpdir(), 'kici-test-')),
    inMemory ? memoryDatabase() : opts.database,
  ]);
  const scalerConfigPath = opts.config ? await writeConfig(opts.config) : opts.scalerConfigPath;
  // The config file written here is ours to remove with the orchestrator (a given path is not).
  const removeOwnConfig = async () => {
    if (opts.config && scalerConfigPath)
      await rm(dirname(scalerConfigPath), { recursive: true, force: true });
  };
  // Unless the run asks for the log, its last lines are kept to explain a wait that timed out.
  const tail = new LogTail();
  const logger =
    opts.logger ??
    (process.env.KICI_TEST_LOG ? pino({ level: process.env.KICI_TEST_LOG }) : pino({ level: 'info' }, tail));
  const orch = await Orchestrator.start({
    port: 0,
    ...opts,
    dataDir,
    database,
    scalerConfigPath,
    logger,
  }).catch(async (err: unknown) => {
    // A start refused before the store was taken over leaves both to us (closing twice is harmless).
    if (inMemory) await database?.close().catch(() => {});
    if (!opts.dataDir) await rm(dataDir, { recursive: true, force: true });
    await removeOwnConfig();
    throw err;
  });
  const api = async <T>(method: string, path: string, body?: unknown) => {
    const res = await fetch(`${orch.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${orch.adminToken}`,
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
    });
    return { status: res.status, body: (await res.json()) as T };
  };
  let stopped = false;
  return {
    orch,
    dataDir,
    api,
    waitForJob: (jobId, states = FINAL, timeoutMs = 60_000) =>
      waitForJobEvent(orch, api, jobId, states, timeoutMs).catch((err: unknown) => {
        throw tail.explain(err);
      }),
    async stop() {
      if (stopped) return;
      stopped = true;
      await orch.stop();
      if (!opts.dataDir) await rm(dataDir, { recursive: true, force: true });
      await removeOwnConfig();
    },
  };
}

/** The last lines an orchestrator logged, added to the message of a wait that failed. */
class LogTail {
  private readonly lines: string[] = [];
  write(line: string): void {
    this.lines.push(line.trimEnd());
    if (this.lines.length > 60) this.lines.shift();
  }
  explain(err: unknown): unknown {
    if (!(err instanceof Error) || !this.lines.length) return err;
    err.message += `\nthe orchestrator's last log lines:\n${this.lines.join('\n')}`;
    return err;
  }
}

/**
 * Read the job until it is in one of `states`, reading again each time the orchestrator says this
 * job started or settled. Listening starts before the first read, so a change between the read and
 * the wait is never missed. A slow re-read is the backstop for changes no event reports (a claim,
 * a row another instance wrote).
 */
async function waitForJobEvent(
  orch: Orchestrator,
  api: TestOrchestrator['api'],
  jobId: string,
  states: string[],
  timeoutMs: number,
): Promise<JobBody> {
  const until = Date.now() + timeoutMs;
  let wake = () => {};
  const mine = (e: { jobId: string }) => e.jobId === jobId && wake();
  const offs = [orch.events.on('job.started', mine), orch.events.on('job.settled', mine)];
  try {
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const changed = new Promise<void>((r) => {
        wake = r;
        timer = setTimeout(r, Math.max(0, Math.min(BACKSTOP_MS, until - Date.now())));
      });
      // A read is safe to repeat: a dropped connection (a kept-alive socket the server closed
      // while a loaded host was slow to reuse it) is read again, not the end of the wait.
      const read = await api<JobBody>('GET', `/api/v1/jobs/${jobId}`).then(
        (r) => r.body,
        (err: unknown) => err,
      );
      const body = read instanceof Error ? undefined : (read as JobBody);
      if (body && states.includes(body.state)) {
        clearTimeout(timer);
        return body;
      }
      if (Date.now() > until)
        throw new Error(
          `job ${jobId} still ${body ? describeJob(body) : `unread (${String(read)})`} after ${timeoutMs} ms`,
        );
      await changed;
      clearTimeout(timer);
    }
  } finally {
    for (const off of offs) off();
  }
}
const BACKSTOP_MS = 500;

/** A job's state with what the orchestrator says it waits on, for a timed-out wait's message. */
function describeJob(j: JobBody): string {
  const why = [
    j.waiting && `waiting: ${j.waiting}`,
    j.reason && `reason: ${j.reason}`,
    j.lastProvisioningError && `last provisioning error: ${j.lastProvisioningError}`,
  ].filter(Boolean);
  return why.length ? `${j.state} (${why.join('; ')})` : j.state;
}

/** Start a process with Node 24 and collect its output. */
export function runNode(args: string[], env: NodeJS.ProcessEnv = {}, opts: { cwd?: string } = {}) {
  const child: ChildProcess = spawn(NODE, args, {
    env: { ...process.env, ...env },
    cwd: opts.cwd ?? ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d) => (stdout += String(d)));
  child.stderr!.on('data', (d) => (stderr += String(d)));
  const exited = new Promise<{
    code: number | null;
    signal: NodeJS.Signals | null;
    stdout: string;
    stderr: string;
  }>((res) => child.on('close', (code, signal) => res({ code, signal, stdout, stderr })));
  return { child, exited, output: () => ({ stdout, stderr }) };
}

/** Is any process with this pid (or group) alive? */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * For `eventually`: true once the scaler holds no agent; until then it throws the agents it still
 * holds, with their phase and age, so a wait that times out says which agent stayed and where.
 */
export function scalerIdle(scaler: {
  entries(): readonly { agentId: string; phase: string; createdAtMs: number }[];
  readonly teardownsInFlight?: number;
}): true {
  const left = scaler.entries();
  if (!left.length) return true;
  const now = Date.now();
  throw new Error(
    `${left.length} agent(s) still held: ` +
      left.map((e) => `${e.agentId} (${e.phase}, ${now - e.createdAtMs} ms old)`).join(', ') +
      (scaler.teardownsInFlight !== undefined ? `; teardowns in flight: ${scaler.teardownsInFlight}` : ''),
  );
}

export async function eventually<T>(
  fn: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  timeoutMs = 10_000,
  what = 'condition',
): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > until)
      throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
