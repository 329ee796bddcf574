/**
 * The VM backend with the qemu driver keeps the backend contract (system tier, netns kici-sys):
 * real QEMU microvm guests whose agent registers with a real test orchestrator over the bridge.
 * Compute is judged from /proc (QEMU processes naming the VM's directory), not from the backend.
 */
import { spawn as spawnChild } from 'node:child_process';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { pino } from 'pino';
import { afterAll, beforeAll } from 'vitest';
import { scalerFileSchema, type ScalerConfig, type ScalerEntry } from '../../src/config/index.js';
import { createScalerBackend } from '../../src/scaler/backends/registry.js';
import { agentLabelsFor } from '../../src/scaler/core/routing.js';
import type { ScalerBackend } from '../../src/scaler/types.js';
import { systemClock } from '../../src/util/clock.js';
import { describeBackendContract, type ContractFixture } from '../helpers/backend-contract.js';
import { running, submit } from '../helpers/jobs.js';
import { eventually, ROOT, startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';
import { deleteLink, qemuPidsUnder, vmConfig } from '../helpers/vm.js';

const BRIDGE = 'vmc-br0';
const TABLE = 'vmc-t';
const LABELS = ['linux', 'vmc'];

let t: TestOrchestrator;
let base: string;
let config: ScalerConfig;
let entry: ScalerEntry;
beforeAll(async () => {
  base = await mkdtemp(join(tmpdir(), 'kici-vmc-'));
  config = scalerFileSchema.parse(
    vmConfig({ name: 'vmc', bridge: BRIDGE, subnet: '10.231.8', base, table: TABLE }),
  );
  entry = config.scalers[0]!;
  // No scaler config: the VM agents register as static agents with tokens the fixture mints.
  t = await startTestOrchestrator({ host: '0.0.0.0' });
});
afterAll(async () => {
  await t?.stop();
  await deleteLink(BRIDGE);
  await promisify(execFile)('nft', ['delete', 'table', 'inet', TABLE]).catch(() => {});
  await rm(base, { recursive: true, force: true });
});

const computeExists = async (agentId: string) =>
  (await qemuPidsUnder(join(base, 'firecracker', agentId))).length > 0;

async function vmFixture(): Promise<ContractFixture> {
  const built: ScalerBackend[] = [];
  const ids = new Set<string>();
  const foreign: number[] = [];
  const build = async () => {
    const b = await createScalerBackend(entry, {
      logger: pino({ level: process.env.KICI_TEST_LOG ?? 'silent' }),
      clock: systemClock,
      store: t.orch.store,
      configPath: join(ROOT, 'scalers.yaml'),
      hostEnv: process.env,
      vmNetwork: config.firecracker,
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
    computeExists,
    async runJob(agentId) {
      await eventually(() => t.orch.dispatcher.registry.get(agentId), 120_000, `${agentId} to register`);
      const [jobId] = await submit(t, { job: { runsOn: LABELS, steps: [{ run: 'echo contract' }] } });
      const job = await t.waitForJob(jobId!, undefined, 60_000);
      return job.agentId === agentId ? job.state : `ran on ${job.agentId ?? 'no agent'} (${job.state})`;
    },
    async foreignCompute() {
      const child = spawnChild('sleep', ['60'], { detached: true, stdio: 'ignore' });
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
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      for (const id of ids) await eventually(async () => !(await computeExists(id)), 20_000, `${id} gone`);
    },
  };
}

describeBackendContract('VM backend (qemu driver)', vmFixture);
