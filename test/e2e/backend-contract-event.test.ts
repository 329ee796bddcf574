/**
 * The event backend keeps the backend contract, lifetime rule included (cluster: shutdownAll
 * leaves provisions alone). Built through the registry like the orchestrator builds it, with the
 * store's claim table. Its "cloud" is the emitter injected through BackendDeps: a scale-up boots a
 * detached kici-agent that redeems the claim code; a scale-down kills it. Compute is judged from
 * /proc, never from the backend.
 */
import { spawn as spawnChild } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll } from 'vitest';
import { scalerFileSchema, type ScalerEntry } from '../../src/config/index.js';
import { createScalerBackend } from '../../src/scaler/backends/registry.js';
import { agentLabelsFor } from '../../src/scaler/core/routing.js';
import type { ScalerEventEmitterLike } from '../../src/scaler/events/payloads.js';
import type { ScalerBackend } from '../../src/scaler/types.js';
import { systemClock } from '../../src/util/clock.js';
import { describeBackendContract, type ContractFixture } from '../helpers/backend-contract.js';
import { running, submit } from '../helpers/jobs.js';
import { MARKER } from '../helpers/leftover-processes.js';
import {
  AGENT_BIN,
  eventually,
  NODE,
  ROOT,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { pidsWithEnv } from '../helpers/processes.js';
import { stringify } from 'yaml';

const LABELS = ['contract-ev'];

let t: TestOrchestrator;
let templateDir: string;
beforeAll(async () => {
  // Never run (nothing routes to ev-host), but a job: target must be a valid run file to start.
  templateDir = await mkdtemp(join(tmpdir(), 'kici-contract-ev-'));
  await writeFile(
    join(templateDir, 'unused.yaml'),
    'jobs:\n  provision:\n    runsOn: [nowhere]\n    steps: [{ run: "true" }]\n',
  );
  // Claims yield ephemeral tokens, which only an orchestrator with a scaler accepts. Its own event
  // scaler serves other labels, so it never provisions for the contract's jobs.
  // A job: target lies inside the config's directory, so the config is written beside it.
  const configPath = join(templateDir, 'scalers.yaml');
  await writeFile(
    configPath,
    stringify({
      version: 1,
      scalers: [
        {
          name: 'ev-host',
          type: 'event',
          maxAgents: 1,
          labelSets: [{ labels: ['contract-ev-unrouted'] }],
          provisioningTargets: ['job:unused.yaml'],
        },
      ],
    }),
  );
  t = await startTestOrchestrator({ scalerConfigPath: configPath });
});
afterAll(async () => {
  await t?.stop();
  await rm(templateDir, { recursive: true, force: true });
});

const entry: ScalerEntry = scalerFileSchema.parse({
  version: 1,
  scalers: [
    {
      name: 'ev-contract',
      type: 'event',
      maxAgents: 8,
      labelSets: [{ labels: LABELS }],
      provisioningTargets: ['job:unused.yaml'],
    },
  ],
}).scalers[0]!;

async function livePids(agentId: string): Promise<number[]> {
  const live: number[] = [];
  for (const pid of await pidsWithEnv(`KICI_AGENT_ID=${agentId}`)) if (await running(pid)) live.push(pid);
  return live;
}

/** A cloud simulator: one process group per instance, booted from the payload alone. */
class ProcessCloud implements ScalerEventEmitterLike {
  readonly downs = new Map<string, number>();
  private n = 0;

  async emitScalerScaleUp(p: Parameters<ScalerEventEmitterLike['emitScalerScaleUp']>[0]): Promise<string> {
    const child = spawnChild(NODE, [AGENT_BIN], {
      detached: true,
      stdio: ['ignore', 'ignore', process.env.KICI_TEST_LOG ? 'inherit' : 'ignore'],
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        [MARKER]: process.env[MARKER],
        KICI_SCALER_CLAIM_CODE: p.claimCode,
        KICI_AGENT_ID: p.agentId,
        KICI_LABELS: p.labels.join(','),
        KICI_ORCHESTRATOR_URL: p.orchestratorUrl,
        KICI_SCALER_MANAGED: '1',
      },
    });
    await new Promise<void>((ok, fail) => child.once('spawn', ok).once('error', fail));
    child.unref();
    return `up-${++this.n}`;
  }

  async emitScalerScaleDown(
    p: Parameters<ScalerEventEmitterLike['emitScalerScaleDown']>[0],
  ): Promise<string> {
    this.downs.set(p.agentId, (this.downs.get(p.agentId) ?? 0) + 1);
    for (const pid of await livePids(p.agentId)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    await eventually(async () => (await livePids(p.agentId)).length === 0, 10_000, `${p.agentId} stopped`);
    return `down-${++this.n}`;
  }
}

async function eventFixture(): Promise<ContractFixture> {
  const cloud = new ProcessCloud();
  const built: ScalerBackend[] = [];
  const ids = new Set<string>();
  const build = async () => {
    const b = await createScalerBackend(entry, {
      logger: pino({ level: 'silent' }),
      clock: systemClock,
      store: t.orch.store,
      configPath: join(ROOT, 'scalers.yaml'),
      scaleEvents: cloud,
    });
    built.push(b);
    return b;
  };
  const backend = await build();
  return {
    backend,
    entry,
    context(agentId, signal) {
      ids.add(agentId);
      return Promise.resolve({
        agentId,
        labelSet: LABELS,
        fullLabels: agentLabelsFor(entry, LABELS),
        mandatoryLabels: [],
        taints: [],
        orchestratorUrl: t.orch.wsUrl,
        auth: { kind: 'claim', code: '' },
        limits: undefined,
        boundJobId: undefined,
        runId: undefined,
        image: undefined,
        signal,
        onEvent: () => {},
      });
    },
    computeExists: async (agentId) => (await livePids(agentId)).length > 0,
    async runJob(agentId) {
      await eventually(() => t.orch.dispatcher.registry.get(agentId), 30_000, `${agentId} to register`);
      const [jobId] = await submit(t, { job: { runsOn: LABELS, steps: [{ run: 'echo contract' }] } });
      const job = await t.waitForJob(jobId!);
      return job.agentId === agentId ? job.state : `ran on ${job.agentId ?? 'no agent'} (${job.state})`;
    },
    foreignCompute() {
      // Never asked: the event backend has no reapUnowned (it has no host evidence to go on).
      return Promise.reject(new Error('the event backend does not reap'));
    },
    restart: build,
    teardowns: (agentId) => cloud.downs.get(agentId) ?? 0,
    async close() {
      for (const b of built)
        await Promise.allSettled([...ids].map((id) => b.destroy(id, { reason: 'shutdown' })));
      for (const id of ids)
        await eventually(async () => (await livePids(id)).length === 0, 10_000, `${id} gone`);
    },
  };
}

describeBackendContract('event backend', eventFixture);
