/**
 * Chaos cells on the container backend (the engine the suite runs against: Docker or Podman). The
 * orchestrator is in-process and reaches the engine through a socket proxy the test can shut (an
 * engine outage); its agents' steps run inside their containers, so a step is held by a sleep long
 * enough to inject the fault while every job runs.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  containerScaler,
  docker,
  ENGINE_SOCKET,
  RecordingIsolation,
  removeScalerContainers,
  scalerContainers,
} from '../helpers/engine.js';
import { DEFAULT_AGENT_TABLE } from '../../src/net/nft-isolation.js';
import { submit } from '../helpers/jobs.js';
import { flushAddresses, ruledAddresses } from '../helpers/nft-host.js';
import { eventually, startTestOrchestrator, type JobBody } from '../helpers/orchestrator.js';
import { SocketProxy } from '../helpers/socket-proxy.js';
import type { CellOutcome, Fault } from './matrix.js';
import { runServeCell, type ServeCellSpec } from './serve-cell.js';

const JOBS = 3;
const FINAL = ['succeeded', 'failed', 'cancelled', 'timed-out', 'no-backend'];

export const CONTAINER_FAULTS: readonly Fault[] = [
  'engine outage',
  'nft flush ruleset',
  'agent killed mid-step',
];
/** Cells that need the orchestrator as its own process (killed, or its clock stepped). */
export const CONTAINER_SERVE_FAULTS: readonly Fault[] = [
  'kill -9 orchestrator',
  'wall clock ±1 h',
  'PostgreSQL restart',
  'data-dir disk full',
  'kill -9 cluster leader',
];

/**
 * A held step: it runs until the test writes the go file inside its container. A fixed sleep would
 * end the first job before a slow engine had started the last one, and "every job running" would
 * then never be seen.
 */
const GO = '/tmp/kici-chaos-go';
const HELD_STEP = `echo chaos-start; while [ ! -e ${GO} ]; do sleep 0.2; done; echo chaos-end`;

/**
 * Lets the held steps of one scaler's running containers end. The go file is written through the
 * engine's own socket (not the cell's proxy, which an outage has shut), once per container: every
 * exec leaves a Podman monitor process behind for minutes. Safe to call again, so a wait that calls
 * it also releases a step that started after an earlier call.
 */
function stepReleaser(name: string): () => Promise<void> {
  const released = new Set<string>();
  return async () => {
    for (const c of await scalerContainers(name)) {
      if (c.State !== 'running' || released.has(c.Id)) continue;
      const ok = await docker
        .getContainer(c.Id)
        .exec({ Cmd: ['sh', '-c', `: > ${GO}`] })
        .then((e) => e.start({ Detach: true }))
        .then(
          () => true,
          () => false,
        );
      if (ok) released.add(c.Id);
    }
  };
}

/** What each job of a burst is doing, for a wait's error. */
function states(jobs: JobBody[]): string {
  return jobs
    .map(
      (j) =>
        `${j.id} ${j.state}${j.reason ? ` (${j.reason})` : ''}${j.lastProvisioningError ? ` [${j.lastProvisioningError}]` : ''}`,
    )
    .join('; ');
}

/** A step of the burst is still held: its shell (which holds the end line) is still there. */
async function stepsRunning(name: string): Promise<number> {
  let n = 0;
  for (const c of await scalerContainers(name)) {
    if (c.State !== 'running') continue;
    const top = await docker
      .getContainer(c.Id)
      .top()
      .catch(() => ({ Processes: [] as string[][] }));
    if (((top.Processes ?? []) as string[][]).some((p) => p.join(' ').includes('chaos-end'))) n++;
  }
  return n;
}

/**
 * The container spec for a serve cell. A serve process cannot be handed a test firewall, so this
 * scaler runs without isolation; a step is held until the cell releases it.
 */
export function containerServeSpec(name: string): ServeCellSpec {
  const releaseSteps = stepReleaser(name);
  return {
    config: { version: 1, scalers: [containerScaler(name, { maxAgents: JOBS, networkIsolation: false })] },
    host: '0.0.0.0',
    // Four cells start containers at once beside the other suites: a loaded 2-core host has been
    // seen to take over two minutes to have all three running (a deadline, not a wait).
    runningTimeoutMs: 240_000,
    // Several serve processes start at once beside the engine: slow on a loaded 2-core host.
    readyTimeoutMs: 180_000,
    runsOn: [name],
    step: () => HELD_STEP,
    release: releaseSteps,
    // Seen from the engine, not the orchestrator: no container still runs its step's shell.
    ended: async () => {
      await releaseSteps();
      return (await stepsRunning(name)) === 0;
    },
    starts: (h, ids) =>
      Promise.all(ids.map(async (id) => (await h.log(id)).filter((l) => l === 'chaos-start').length)),
    hostLeft: async () => (await scalerContainers(name)).length,
    async killAgent() {
      const [victim] = await scalerContainers(name);
      await docker.getContainer(victim!.Id).kill({ signal: 'SIGKILL' });
    },
    clockSteps: ['+1h', '-1h'],
    cleanup: () => removeScalerContainers(name),
  };
}

export async function runContainerServeCell(fault: Fault, name: string): Promise<CellOutcome> {
  return runServeCell(fault, containerServeSpec(name), randomBytes(4).toString('hex'));
}

export async function runContainerCell(fault: Fault, name: string): Promise<CellOutcome> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-chaos-engine-'));
  const proxy = new SocketProxy(join(dir, 'engine.sock'), ENGINE_SOCKET);
  await proxy.start();
  const isolation = new RecordingIsolation();
  const releaseSteps = stepReleaser(name);
  const t = await startTestOrchestrator({
    host: '0.0.0.0',
    isolation,
    // The periodic audit is part of what is under test: it removes stopped leftovers.
    scalerAuditIntervalMs: 5_000,
    config: { version: 1, scalers: [containerScaler(name, { socketPath: proxy.path, maxAgents: JOBS })] },
  });
  try {
    const jobs: Record<string, unknown> = {};
    // Each step counts its own starts in the job's output: two "start" lines are a job run twice.
    for (let i = 0; i < JOBS; i++) jobs[`c${i}`] = { runsOn: [name], steps: [{ run: HELD_STEP }] };
    const ids = await submit(t, jobs);
    const read = () =>
      Promise.all(ids.map(async (id) => (await t.api<JobBody>('GET', `/api/v1/jobs/${id}`)).body));
    await eventually(
      async () => (await read()).every((j) => j.state === 'running'),
      240_000,
      'burst running',
    ).catch(async (err: unknown) => {
      throw new Error(`${(err as Error).message}: ${states(await read())}`);
    });

    let note = '';
    if (fault === 'engine outage') {
      // The engine is gone while the jobs end and their containers should be removed.
      await proxy.stop();
      await eventually(
        async () => {
          await releaseSteps();
          return (await read()).every((j) => FINAL.includes(j.state));
        },
        120_000,
        'jobs final',
      ).catch(async (err: unknown) => {
        throw new Error(`${(err as Error).message}: ${states(await read())}`);
      });
      await proxy.start();
    } else if (fault === 'nft flush ruleset') {
      // The table is every container scaler's on this host (other tests' agents too), so only this
      // cell's agents lose their rules: map elements gone, chains emptied. The whole table going is
      // the micro-VM cell's fault, and the unit tests'.
      const ips = [...isolation.ruled];
      if (ips.length !== JOBS)
        // What the backend asked of the firewall, so a failure says where the rules went.
        throw new Error(
          `expected ${JOBS} agents with rules, saw ${ips.length}; applied ${JSON.stringify(
            isolation.applied.map((r) => [r.agentId, r.ip]),
          )}, removed ${JSON.stringify(isolation.removed)}, reaped ${JSON.stringify(isolation.reaped)}; ${states(await read())}`,
        );
      await flushAddresses(DEFAULT_AGENT_TABLE, ips);
      const t0 = Date.now();
      await eventually(
        async () => {
          const now = new Set(await ruledAddresses(DEFAULT_AGENT_TABLE));
          return ips.every((ip) => now.has(ip));
        },
        60_000,
        'the agents firewall rules back in force',
      );
      note = `rules of ${ips.length} agents back in force after ${((Date.now() - t0) / 1000).toFixed(1)} s`;
    } else if (fault === 'agent killed mid-step') {
      // The agent is the container's process 1: SIGKILL through the engine ends it mid-step.
      const [victim] = await scalerContainers(name);
      await docker.getContainer(victim!.Id).kill({ signal: 'SIGKILL' });
    } else throw new Error(`no container runner for ${fault}`);

    let final: JobBody[] = [];
    await eventually(
      async () => {
        await releaseSteps();
        final = await read();
        return final.every((j) => FINAL.includes(j.state));
      },
      120_000,
      'every job final',
    ).catch(() => undefined);
    let starts = 0;
    for (const id of ids) {
      const logs = await t.api<{ lines: { line: string }[] }>('GET', `/api/v1/jobs/${id}/logs`);
      if (logs.body.lines.filter((l) => l.line === 'chaos-start').length > 1) starts++;
    }
    // A stopped container still on the engine is a leak too (disk, a name), whatever its state; a
    // killed agent's container is removed by its teardown, so the wait covers that teardown too.
    const settled = async () => ({
      audit: (await t.orch.auditor!.audit()).drift.length,
      host: (await scalerContainers(name)).length,
    });
    let left = await settled();
    await eventually(
      async () => {
        left = await settled();
        return left.audit === 0 && left.host === 0;
      },
      60_000,
      'no drift and no container left',
    ).catch(() => undefined);
    const notOk = final.filter((j) => j.state !== 'succeeded');
    const reasons = [...new Set(notOk.map((j) => `${j.state}: ${j.reason ?? 'no reason given'}`))];
    if (!reasons.length) reasons.push('all succeeded');
    if (note) reasons.push(note);
    return {
      jobs: ids.length,
      lost: final.filter((j) => !FINAL.includes(j.state)).length,
      twice: starts,
      leakedAudit: left.audit,
      leakedHost: left.host,
      reason: reasons.join('; '),
    };
  } finally {
    await t.stop();
    await proxy.stop();
    await rm(dir, { recursive: true, force: true });
  }
}
