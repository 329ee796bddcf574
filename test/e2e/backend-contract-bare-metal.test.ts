/**
 * The real bare-metal backend keeps the backend contract: real agent processes (dist/cli/agent.js)
 * that register with a real test orchestrator and run a real job. The backend is built through the
 * registry, as the orchestrator builds it; compute is judged from /proc, not from the backend.
 */
import { spawn as spawnChild } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll } from 'vitest';
import { scalerFileSchema, type ScalerEntry } from '../../src/config/index.js';
import { createScalerBackend } from '../../src/scaler/backends/registry.js';
import { agentLabelsFor } from '../../src/scaler/core/routing.js';
import type { ScalerBackend } from '../../src/scaler/types.js';
import { systemClock } from '../../src/util/clock.js';
import { describeBackendContract, type ContractFixture } from '../helpers/backend-contract.js';
import { running, submit } from '../helpers/jobs.js';
import {
  AGENT_BIN,
  eventually,
  ROOT,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { pidsWithEnv } from '../helpers/processes.js';

const LABELS = ['contract-bm'];

let t: TestOrchestrator;
beforeAll(async () => {
  // No scaler config: the agents register as static agents with tokens the fixture mints.
  t = await startTestOrchestrator();
});
afterAll(async () => {
  await t?.stop();
});

const entry: ScalerEntry = scalerFileSchema.parse({
  version: 1,
  scalers: [
    {
      name: 'bm-contract',
      type: 'bare-metal',
      maxAgents: 8,
      labelSets: [{ labels: LABELS, binaryPath: AGENT_BIN, trust: 'host' }],
    },
  ],
}).scalers[0]!;

async function livePids(agentId: string): Promise<number[]> {
  const pids = await pidsWithEnv(`KICI_AGENT_ID=${agentId}`);
  const live: number[] = [];
  for (const pid of pids) if (await running(pid)) live.push(pid);
  return live;
}

async function bareMetalFixture(): Promise<ContractFixture> {
  const built: ScalerBackend[] = [];
  const ids = new Set<string>();
  const foreign: number[] = [];
  const build = async () => {
    const b = await createScalerBackend(entry, {
      logger: pino({ level: 'silent' }),
      clock: systemClock,
      store: t.orch.store,
      configPath: join(ROOT, 'scalers.yaml'),
      hostEnv: process.env,
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
    computeExists: async (agentId) => (await livePids(agentId)).length > 0,
    async runJob(agentId) {
      await eventually(() => t.orch.dispatcher.registry.get(agentId), 30_000, `${agentId} to register`);
      const [jobId] = await submit(t, { job: { runsOn: LABELS, steps: [{ run: 'echo contract' }] } });
      const job = await t.waitForJob(jobId!);
      return job.agentId === agentId ? job.state : `ran on ${job.agentId ?? 'no agent'} (${job.state})`;
    },
    async foreignCompute() {
      // Someone else's process, handed to reapUnowned under an id of ours and its real pid.
      const child = spawnChild('sleep', ['60'], {
        detached: true,
        stdio: 'ignore',
        env: { ...process.env, KICI_AGENT_ID: 'not-this-backend' },
      });
      await new Promise<void>((ok, fail) => child.once('spawn', ok).once('error', fail));
      child.unref();
      foreign.push(child.pid!);
      return {
        agentId: `contract-foreign-${randomUUID().slice(0, 8)}`,
        ref: String(child.pid),
        exists: () => running(child.pid!),
      };
    },
    restart: build,
    async close() {
      for (const b of built)
        await Promise.allSettled([...ids].map((id) => b.destroy(id, { reason: 'shutdown' })));
      for (const pid of foreign) {
        try {
          process.kill(-pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      for (const id of ids)
        await eventually(async () => (await livePids(id)).length === 0, 10_000, `${id} gone`);
    },
  };
}

describeBackendContract('bare-metal backend', bareMetalFixture);
