/**
 * Bare-metal job-image mode keeps the backend contract on a real engine (KICI_TEST_ENGINE): a
 * bare-metal scaler whose label set has `image` and no `binaryPath` starts agent containers that
 * register with a real test orchestrator and run a real job. Built through the registry; compute is
 * judged from the engine's own container list. (Process mode: test/e2e/backend-contract-bare-metal.)
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll } from 'vitest';
import { scalerFileSchema, type ScalerEntry } from '../../../src/config/index.js';
import { createScalerBackend } from '../../../src/scaler/backends/registry.js';
import { agentLabelsFor } from '../../../src/scaler/core/routing.js';
import type { ScalerBackend } from '../../../src/scaler/types.js';
import { systemClock } from '../../../src/util/clock.js';
import { describeBackendContract, type ContractFixture } from '../../helpers/backend-contract.js';
import {
  AGENT_IMAGE,
  BUSYBOX_IMAGE,
  docker,
  ENGINE,
  ENGINE_SOCKET,
  RecordingIsolation,
  removeScalerContainers,
} from '../../helpers/engine.js';
import { submit } from '../../helpers/jobs.js';
import {
  eventually,
  ROOT,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';

const NAME = `contract-bmji-${ENGINE}`;
const FOREIGN = `contract-bmji-foreign-${ENGINE}`;
const LABELS = [NAME];

let t: TestOrchestrator;
beforeAll(async () => {
  t = await startTestOrchestrator({ host: '0.0.0.0' });
});
afterAll(async () => {
  await t?.stop();
  await removeScalerContainers(NAME, FOREIGN);
});

const entry: ScalerEntry = scalerFileSchema.parse({
  version: 1,
  scalers: [
    {
      name: NAME,
      type: 'bare-metal',
      maxAgents: 4,
      socketPath: ENGINE_SOCKET,
      labelSets: [{ labels: LABELS, image: AGENT_IMAGE, imagePullPolicy: 'Never' }],
    },
  ],
}).scalers[0]!;

async function containersOf(agentId: string) {
  return docker.listContainers({ all: true, filters: { label: [`kici-agent-id=${agentId}`] } });
}

async function jobImageFixture(): Promise<ContractFixture> {
  const built: ScalerBackend[] = [];
  const ids = new Set<string>();
  const isolation = new RecordingIsolation();
  const build = async () => {
    const b = await createScalerBackend(entry, {
      logger: pino({ level: 'silent' }),
      clock: systemClock,
      store: t.orch.store,
      configPath: join(ROOT, 'scalers.yaml'),
      hostEnv: process.env,
      docker,
      engine: { runtime: ENGINE, socketPath: ENGINE_SOCKET, local: true },
      isolation,
    });
    built.push(b);
    return b;
  };
  const backend = await build();
  return {
    backend,
    entry,
    async context(agentId, signal) {
      ids.add(agentId);
      const fullLabels = agentLabelsFor(entry, LABELS);
      const { token } = await t.orch.store.tokens.mint({
        agentId,
        labels: fullLabels,
        kind: 'static',
        now: new Date(),
      });
      return {
        agentId,
        labelSet: LABELS,
        fullLabels,
        mandatoryLabels: [],
        taints: [],
        orchestratorUrl: t.orch.wsUrl,
        auth: { kind: 'token', token },
        limits: undefined,
        boundJobId: undefined,
        runId: undefined,
        image: undefined,
        signal,
        onEvent: () => {},
      };
    },
    computeExists: async (agentId) => (await containersOf(agentId)).length > 0,
    async runJob(agentId) {
      await eventually(() => t.orch.dispatcher.registry.get(agentId), 60_000, `${agentId} to register`);
      const [jobId] = await submit(t, { job: { runsOn: LABELS, steps: [{ run: 'echo contract' }] } });
      const job = await t.waitForJob(jobId!, undefined, 60_000);
      return job.agentId === agentId ? job.state : `ran on ${job.agentId ?? 'no agent'} (${job.state})`;
    },
    async foreignCompute() {
      // Another scaler's container carrying the very agent id we will ask to reap.
      const agentId = `contract-bmji-foreign-${randomUUID().slice(0, 8)}`;
      const c = await docker.createContainer({
        Image: BUSYBOX_IMAGE,
        Cmd: ['sleep', '300'],
        Labels: { 'kici-managed': 'true', 'kici-scaler-name': FOREIGN, 'kici-agent-id': agentId },
        HostConfig: { NetworkMode: 'none' },
      });
      await c.start();
      return {
        agentId,
        ref: c.id,
        exists: async () => (await containersOf(agentId)).some((x) => x.State === 'running'),
      };
    },
    restart: build,
    async close() {
      for (const b of built)
        await Promise.allSettled([...ids].map((id) => b.destroy(id, { reason: 'shutdown' })));
      await removeScalerContainers(FOREIGN);
      for (const id of ids)
        await eventually(async () => (await containersOf(id)).length === 0, 30_000, `${id} gone`);
    },
  };
}

describeBackendContract(`bare-metal job-image mode on ${ENGINE}`, jobImageFixture);
