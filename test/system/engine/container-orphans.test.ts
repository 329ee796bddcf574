/**
 * Orphan sweeps on a shared engine: two scalers in one orchestrator and a second orchestrator with
 * its own scaler. No sweep removes another's running agents; each removes only its own scaler's
 * containers that no live agent owns (stopped, or running with an agent it does not know).
 */
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { sweepOrphans } from '../../../src/server/orphan-sweep.js';
import {
  BUSYBOX_IMAGE,
  containerScaler,
  docker,
  ENGINE,
  RecordingIsolation,
  removeScalerContainers,
  scalerContainers,
} from '../../helpers/engine.js';
import { submit } from '../../helpers/jobs.js';
import { eventually, startTestOrchestrator, type TestOrchestrator } from '../../helpers/orchestrator.js';

const A1 = `orph-a1-${ENGINE}`;
const A2 = `orph-a2-${ENGINE}`;
const B = `orph-b-${ENGINE}`;
const started: TestOrchestrator[] = [];
afterEach(async () => {
  for (const t of started.splice(0)) await t.stop();
  await removeScalerContainers(A1, A2, B);
});

async function orchestrator(...names: string[]) {
  const t = await startTestOrchestrator({
    host: '0.0.0.0',
    isolation: new RecordingIsolation(),
    config: { version: 1, scalers: names.map((n) => containerScaler(n)) },
  });
  started.push(t);
  return t;
}

const running = async (name: string) => (await scalerContainers(name)).filter((c) => c.State === 'running');

async function plant(scaler: string, agentId: string, run: boolean) {
  const c = await docker.createContainer({
    Image: BUSYBOX_IMAGE,
    Cmd: ['sleep', '300'],
    Labels: { 'kici-managed': 'true', 'kici-scaler-name': scaler, 'kici-agent-id': agentId },
    HostConfig: { NetworkMode: 'none' },
  });
  if (run) await c.start();
  return c.id;
}

const exists = (id: string) =>
  docker
    .getContainer(id)
    .inspect()
    .then(
      () => true,
      () => false,
    );

/** Let a held step finish: create the file it waits for, inside its agent's container. */
async function release(id: string): Promise<void> {
  const exec = await docker
    .getContainer(id)
    .exec({ Cmd: ['touch', '/tmp/kici-release'], AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({});
  await new Promise<void>((done, fail) => {
    stream.on('end', done);
    stream.on('error', fail);
    stream.resume();
  });
}

describe(`orphan sweeps on a shared ${ENGINE} engine`, () => {
  it("never removes another scaler's or another orchestrator's running agents", async () => {
    const a = await orchestrator(A1, A2);
    const b = await orchestrator(B);
    // Each step holds until the test releases it, so the agents are still running at the sweeps
    // however slow the host is (a fixed sleep ran out under load before the sweeps were done).
    const job = {
      steps: [{ run: 'echo started; until [ -e /tmp/kici-release ]; do sleep 0.1; done; echo finished' }],
    };
    const [j1] = await submit(a, { one: { runsOn: [A1], ...job } });
    const [j2] = await submit(a, { two: { runsOn: [A2], ...job } });
    const [j3] = await submit(b, { three: { runsOn: [B], ...job } });
    for (const n of [A1, A2, B])
      await eventually(async () => (await running(n)).length === 1, 60_000, `${n} agent running`);
    await eventually(
      async () =>
        (await Promise.all([j1, j2].map((j) => a.waitForJob(j!, ['running'], 30_000)))).length === 2,
      60_000,
      'jobs running',
    );
    // Planted leftovers of A1: one stopped, one running with an agent nobody knows.
    const stopped = await plant(A1, 'scaler-container-ghost1', false);
    const unknown = await plant(A1, 'scaler-container-ghost2', true);

    const log = pino({ level: 'silent' });
    // B first: it must leave all of A's containers, live agents and leftovers alike.
    expect(await sweepOrphans(b.orch.scaler!, b.orch.dispatcher, log)).toBe(0);
    expect(await exists(stopped)).toBe(true);
    expect(await exists(unknown)).toBe(true);
    // A removes exactly its two leftovers, and neither scaler's live agent.
    expect(await sweepOrphans(a.orch.scaler!, a.orch.dispatcher, log)).toBe(2);
    expect(await exists(stopped)).toBe(false);
    expect(await exists(unknown)).toBe(false);
    for (const n of [A1, A2, B]) expect((await running(n)).length, n).toBe(1);

    for (const n of [A1, A2, B]) for (const c of await running(n)) await release(c.Id);
    for (const [t, j] of [
      [a, j1],
      [a, j2],
      [b, j3],
    ] as const)
      expect((await t.waitForJob(j!, undefined, 60_000)).state).toBe('succeeded');
    for (const n of [A1, A2, B])
      await eventually(
        async () => (await scalerContainers(n)).length === 0,
        30_000,
        `${n} containers removed`,
      );
  });
});
