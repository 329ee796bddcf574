/**
 * One chaos cell against a real `serve` process (embedded store, its wall clock under libfaketime):
 * a burst of jobs held mid-step, one fault, then the count of what was lost, run twice or left
 * behind. What differs between backends (the scaler, how a step is held, what the host still has)
 * comes in a ServeCellSpec.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { listAgentProcesses } from '../../src/scaler/backends/bare-metal/orphans.js';
import { freePort, startServe, type ServeProcess } from '../helpers/crash.js';
import { clockOffset, twoBeats, type AgentBeatView } from '../helpers/faketime.js';
import { jobGate } from '../helpers/jobs.js';
import { MiB, mountLoopDataDir } from '../helpers/loop-data-dir.js';
import {
  ADMIN_BIN,
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  runNode,
  writeConfig,
  type JobBody,
} from '../helpers/orchestrator.js';
import { startOwnPostgres } from '../helpers/own-postgres.js';
import { LEADER_ENV, leaderSeenBy, startPeer, type LeaderPeer } from './leader-peer.js';
import { pidsWithEnv } from '../helpers/processes.js';
import type { CellOutcome, Fault } from './matrix.js';

const JOBS = 3;
const FINAL = ['succeeded', 'failed', 'cancelled', 'timed-out', 'no-backend'];

/** What one backend brings to a serve cell. */
export interface ServeCellSpec {
  /** Jobs in the burst (default 3). */
  jobs?: number;
  /** How long the burst may take to be running (default 120 s): a VM boots slower than a process. */
  runningTimeoutMs?: number;
  /** The scaler config (one scaler); its jobs run on `runsOn`. */
  config: unknown;
  /** A config file already written (with what it refers to beside it), instead of `config`. */
  configPath?: string;
  /** Listen address (container agents need one they can reach). */
  host?: string;
  /** How long serve may take to be ready (default 60 s). */
  readyTimeoutMs?: number;
  runsOn: string[];
  /** The step's command, given where it appends its start line; it must run until `release`. */
  step(ran: string): string;
  /** Let every held step finish. */
  release(): Promise<void>;
  /** Every step has finished, where the host can see it (a host file); else ending is not awaited. */
  ended?(ids: string[], ran: string): Promise<boolean>;
  /** Where the step writes its start line, and how the test reads it back (job output, a host file). */
  starts(h: { log: (jobId: string) => Promise<string[]> }, ids: string[], ran: string): Promise<number[]>;
  /** Agents, steps, containers still on the host. */
  hostLeft(): Promise<number>;
  /** SIGKILL one running agent. */
  killAgent(): Promise<void>;
  /**
   * Flush the agents' firewall rules from the host (nft itself); returns the addresses whose rules
   * were in force. The cell then waits for `rulesBack` to see them in force again.
   */
  flushRules?(): Promise<string[]>;
  rulesBack?(ips: string[]): Promise<boolean>;
  /** The clock steps to take (each held until two heartbeats passed). */
  clockSteps: string[];
  cleanup(): Promise<void>;
}

/** Every job's step wrote its end line to the host file `ran`. */
export async function endedInFile(ids: string[], ran: string): Promise<boolean> {
  const lines = new Set((await readFile(ran, 'utf8')).split('\n'));
  return ids.every((id) => lines.has(`end ${id}`));
}

export const BARE_METAL_FAULTS: readonly Fault[] = [
  'kill -9 cluster leader',
  'agent killed mid-step',
  'wall clock ±1 h',
  'kill -9 orchestrator',
  'PostgreSQL restart',
  'data-dir disk full',
];

/** The bare-metal spec: steps wait on a host file (a gate), agents are host processes. */
export async function bareMetalSpec(tag: string): Promise<ServeCellSpec> {
  const scaler = `chaos${tag}`;
  const gate = await jobGate();
  return {
    config: bareMetalConfig({ name: scaler, maxAgents: JOBS }, [
      { labels: ['linux', 'chaos'], binaryPath: AGENT_BIN },
    ]),
    runsOn: ['linux', 'chaos'],
    step: (ran) => `echo "start $KICI_JOB_ID" >> '${ran}'; ${gate.wait}; echo "end $KICI_JOB_ID" >> '${ran}'`,
    release: () => gate.open(),
    ended: (ids, ran) => endedInFile(ids, ran),
    async starts(_h, ids, ran) {
      const text = await readFile(ran, 'utf8');
      return ids.map((id) => text.split('\n').filter((l) => l === `start ${id}`).length);
    },
    hostLeft: async () =>
      (await listAgentProcesses(scaler)).length + (await pidsWithEnv(`TEST_TAG=${tag}`)).length,
    async killAgent() {
      const [victim] = await listAgentProcesses(scaler);
      process.kill(victim!.pid, 'SIGKILL');
    },
    clockSteps: ['+1h', '-1h'],
    async cleanup() {
      await gate.open().catch(() => undefined);
      for (const p of await listAgentProcesses(scaler)) process.kill(p.pid, 'SIGKILL');
      for (const pid of await pidsWithEnv(`TEST_TAG=${tag}`)) process.kill(pid, 'SIGKILL');
      await gate.close();
    },
  };
}

interface Harness {
  serve: ServeProcess;
  token: string;
}

async function start(
  config: string,
  port: number,
  dataDir: string,
  env: NodeJS.ProcessEnv,
  spec: Pick<ServeCellSpec, 'host' | 'readyTimeoutMs'>,
): Promise<Harness> {
  const serve = await startServe({
    config,
    port,
    dataDir,
    env,
    ...(spec.host ? { host: spec.host } : {}),
    ...(spec.readyTimeoutMs ? { readyTimeoutMs: spec.readyTimeoutMs } : {}),
  });
  // Each start may write a fresh bootstrap token to the cell's file: read it after the start.
  const token = (await readFile(env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim();
  return { serve, token };
}

async function api<T>(h: Harness, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${h.serve.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${h.token}`,
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return (await res.json()) as T;
}

/** What /readyz says: `ready`, or the status of a 503 (`disk-low`, `store-unwritable`, …). */
async function readyz(h: Harness): Promise<string> {
  const r = await fetch(`${h.serve.url}/readyz`);
  return r.status === 200 ? 'ready' : ((await r.json()) as { status: string }).status;
}

/** One row of the audit's drift, as much of it as a cell's outcome names. */
interface DriftRow {
  kind: string;
  resource: string;
  agentId: string | null;
}

/** Drift `kici-admin scaler audit` reports (the real CLI against the running server). */
async function auditDrift(h: Harness): Promise<DriftRow[]> {
  const r = await runNode([ADMIN_BIN, 'scaler', 'audit', '--json'], {
    KICI_SERVER_URL: h.serve.url,
    KICI_ADMIN_TOKEN: h.token,
  }).exited;
  if (r.code !== 0 && r.code !== 1) throw new Error(`scaler audit exited ${r.code}: ${r.stderr}`);
  return (JSON.parse(r.stdout) as { drift: DriftRow[] }).drift;
}

/** The serve's last warnings and errors (and lines matching `also`), to explain a wait that timed out. */
function warnings(h: Harness, also?: RegExp): string {
  const lines = h.serve.output().stdout.split('\n');
  return lines
    .filter((l) => /"level":[4-6]0/.test(l) || (also?.test(l) ?? false))
    .slice(-40)
    .map((l) => l.slice(0, 1_500))
    .join('\n');
}

export async function runServeCell(fault: Fault, spec: ServeCellSpec, tag: string): Promise<CellOutcome> {
  const port = await freePort();
  // The disk fault needs a small file system of its own to fill.
  const disk = fault === 'data-dir disk full' ? await mountLoopDataDir(128) : undefined;
  const dataDir = disk ? join(disk.mnt, 'data') : await mkdtemp(join(tmpdir(), 'kici-chaos-data-'));
  const work = await mkdtemp(join(tmpdir(), 'kici-chaos-'));
  const ran = join(work, 'ran.log');
  await writeFile(ran, '');
  const clock = await clockOffset();
  // The restart fault needs a server of its own: the shared one must never be restarted. So does
  // the leader fault (a cluster needs PostgreSQL), which may run where the shared one is not reachable.
  const clustered = fault === 'kill -9 cluster leader';
  const postgres = fault === 'PostgreSQL restart' || clustered ? await startOwnPostgres() : undefined;
  // A token file of the cell's own, so cells of different backends can run side by side.
  const env: NodeJS.ProcessEnv = { ...clock.env, KICI_ADMIN_TOKEN_FILE: join(work, 'admin-token') };
  if (postgres) env.KICI_DATABASE_URL = await postgres.database(`chaos_${tag}`);
  // A floor the small file system clears until it is filled (the default is larger than it).
  if (disk) env.KICI_DATA_MIN_FREE_MB = '32';
  const self = `chaos-cell-${tag}`;
  if (clustered) Object.assign(env, LEADER_ENV, { KICI_INSTANCE_ID: self });
  const tokenNow = async () => (await readFile(env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim();
  const peers: LeaderPeer[] = [];
  if (clustered) peers.push(await startPeer(env, `chaos-lead-${tag}`, tokenNow));
  const peer = peers[0];
  const config = spec.configPath ?? (await writeConfig(spec.config));
  let h = await start(config, port, dataDir, env, spec).catch(async (err: unknown) => {
    await peer?.stop();
    await postgres?.stop();
    await disk?.unmount();
    throw err;
  });
  try {
    const jobs: Record<string, unknown> = {};
    for (let i = 0; i < (spec.jobs ?? JOBS); i++)
      jobs[`c${i}`] = { runsOn: spec.runsOn, env: { TEST_TAG: tag }, steps: [{ run: spec.step(ran) }] };
    const run = await api<{ jobs: { id: string }[] }>(h, 'POST', '/api/v1/runs', { jobs });
    const ids = run.jobs.map((j) => j.id);
    const jobsNow = () => Promise.all(ids.map((id) => api<JobBody>(h, 'GET', `/api/v1/jobs/${id}`)));
    await eventually(
      async () => (await jobsNow()).every((j) => j.state === 'running'),
      spec.runningTimeoutMs ?? 120_000,
      'every job of the burst running',
    ).catch(async (err: unknown) => {
      const now = await jobsNow().catch(() => []);
      const what = now.map((j) => `${j.id} ${j.state} ${j.waiting ?? ''} ${j.lastProvisioningError ?? ''}`);
      throw new Error(`${(err as Error).message}: ${what.join('; ')}\nserve said:\n${warnings(h)}`);
    });

    // Every step has printed its start line: the agents are past starting their jobs, and the
    // fault lands mid-step.
    const logOf = async (id: string) =>
      (await api<{ lines: { line: string }[] }>(h, 'GET', `/api/v1/jobs/${id}/logs`)).lines.map(
        (l) => l.line,
      );
    await eventually(
      async () => (await spec.starts({ log: logOf }, ids, ran)).every((n) => n >= 1),
      60_000,
      'every step of the burst started',
    );

    // The fault, mid-step.
    let note = '';
    if (fault === 'agent killed mid-step') await spec.killAgent();
    else if (fault === 'nft flush ruleset' && spec.flushRules && spec.rulesBack) {
      const ips = await spec.flushRules();
      if (!ips.length) throw new Error('no agent had firewall rules in force before the flush');
      const t0 = Date.now();
      await eventually(() => spec.rulesBack!(ips), 60_000, 'the agents firewall rules back in force');
      note = `rules of ${ips.length} agent(s) back in force after ${((Date.now() - t0) / 1000).toFixed(1)} s`;
    } else if (fault === 'wall clock ±1 h') {
      const agentIds = (await jobsNow()).map((j) => j.agentId!);
      const list = async () => (await api<{ agents: AgentBeatView[] }>(h, 'GET', '/api/v1/agents')).agents;
      for (const step of spec.clockSteps) {
        await clock.set(step);
        await twoBeats(list, agentIds).catch((err: unknown) => {
          // What the server said about its agents meanwhile: warnings and every agent event.
          throw new Error(`${(err as Error).message}\nserve said:\n${warnings(h, /agent|heartbeat/i)}`);
        });
      }
    } else if (fault === 'kill -9 orchestrator') {
      process.kill(h.serve.pid, 'SIGKILL');
      await h.serve.exited;
      h = await start(config, port, dataDir, env, spec);
    } else if (fault === 'kill -9 cluster leader' && peer) {
      // Act one: a peer leads; the cell's instance holds every agent and job.
      const before = await leaderSeenBy(h.serve.url, h.token);
      if (before !== peer.id) throw new Error(`expected ${peer.id} to lead, ${before ?? 'none'} does`);
      let t0 = Date.now();
      process.kill(peer.serve.pid, 'SIGKILL');
      await peer.serve.exited;
      await eventually(
        async () => (await leaderSeenBy(h.serve.url, h.token)) === self,
        60_000,
        'the instance holding the agents to take the lease',
      );
      const took1 = (Date.now() - t0) / 1000;
      // Act two: the leader holds the agents; a peer follows.
      const follower = await startPeer(env, `chaos-follow-${tag}`, async () => h.token, false);
      peers.push(follower);
      t0 = Date.now();
      process.kill(h.serve.pid, 'SIGKILL');
      await h.serve.exited;
      await eventually(
        async () => (await leaderSeenBy(follower.serve.url, h.token)) === follower.id,
        60_000,
        'the follower to take the lease',
      );
      const took2 = (Date.now() - t0) / 1000;
      h = await start(config, port, dataDir, env, spec);
      note =
        `leader (a peer) killed: the agents' instance led after ${took1.toFixed(1)} s; ` +
        `leader holding the agents killed: a peer led after ${took2.toFixed(1)} s, the restarted instance kept its agents`;
    } else if (fault === 'PostgreSQL restart' && postgres) {
      // Every connection ended, the server away until it is back; the jobs go on meanwhile.
      await postgres.restart();
    } else if (fault === 'data-dir disk full' && disk) {
      // The data dir down to its last MiB while the steps run and end; then the space is back.
      disk.fill('filler', MiB);
      await eventually(async () => (await readyz(h)) === 'disk-low', 60_000, 'readyz disk-low');
      await spec.release();
      if (spec.ended) await eventually(() => spec.ended!(ids, ran), 60_000, 'every step ended');
      await disk.unfill();
    } else throw new Error(`no serve-cell runner for ${fault}`);

    await spec.release();
    let final: JobBody[] = [];
    await eventually(
      async () => {
        final = await jobsNow();
        return final.every((j) => FINAL.includes(j.state));
      },
      120_000,
      'every job final',
    ).catch(() => undefined);
    const starts = await spec.starts({ log: logOf }, ids, ran);
    // Settling (teardowns, re-adoption) takes a moment: the leak count is what is left after it.
    const settled = async () => ({ audit: await auditDrift(h), host: await spec.hostLeft() });
    let left = await settled();
    await eventually(
      async () => {
        left = await settled();
        return left.audit.length === 0 && left.host === 0;
      },
      60_000,
      'no drift and nothing left on the host',
    ).catch(() => undefined);
    const notOk = final.filter((j) => j.state !== 'succeeded');
    const reasons = [...new Set(notOk.map((j) => `${j.state}: ${j.reason ?? 'no reason given'}`))];
    if (!reasons.length) reasons.push('all succeeded');
    if (note) reasons.push(note);
    // What the audit still saw, so a failed cell says which way the store and the host disagree.
    if (left.audit.length)
      reasons.push(
        `drift: ${left.audit.map((d) => `${d.kind} ${d.resource} ${d.agentId ?? '?'}`).join(', ')}`,
      );
    return {
      jobs: ids.length,
      lost: final.filter((j) => !FINAL.includes(j.state)).length,
      twice: starts.filter((n) => n > 1).length,
      leakedAudit: left.audit.length,
      leakedHost: left.host,
      reason: reasons.join('; '),
    };
  } finally {
    await spec.release().catch(() => undefined);
    if (h.serve.child.exitCode === null && h.serve.child.signalCode === null) {
      h.serve.child.kill('SIGTERM');
      await h.serve.exited;
    }
    await spec.cleanup();
    for (const p of peers) await p.stop();
    await postgres?.stop();
    await disk?.unmount();
    await clock.close();
    for (const d of [dataDir, work, dirname(config)]) await rm(d, { recursive: true, force: true });
  }
}

export async function runBareMetalCell(fault: Fault): Promise<CellOutcome> {
  const tag = randomBytes(4).toString('hex');
  return runServeCell(fault, await bareMetalSpec(tag), tag);
}
