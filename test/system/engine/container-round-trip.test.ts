/**
 * Container backend on a real engine (Docker or Podman, per KICI_TEST_ENGINE): a job runs in a
 * freshly spawned agent container that is gone afterwards; a job naming container.image runs its
 * steps inside that image; the engine's own inspect shows labels, PidsLimit, limits and network.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { AGENT_CONTAINER_CAP_DROP } from '../../../src/scaler/backends/agent-container-host.js';
import { outputLines, submit } from '../../helpers/jobs.js';
import {
  BUSYBOX_IMAGE,
  containerScaler,
  docker,
  ENGINE,
  RecordingIsolation,
  removeScalerContainers,
  scalerContainers,
} from '../../helpers/engine.js';
import { eventually, startTestOrchestrator, type TestOrchestrator } from '../../helpers/orchestrator.js';

const NAME = `rt-${ENGINE}`;
let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
  await removeScalerContainers(NAME);
});

async function start(
  isolation = new RecordingIsolation(),
  overrides: Record<string, unknown> = {},
  sets?: unknown[],
) {
  t = await startTestOrchestrator({
    host: '0.0.0.0',
    isolation,
    config: { version: 1, scalers: [containerScaler(NAME, overrides, sets)] },
  });
  return { t, isolation };
}

describe(`container backend round trip on ${ENGINE}`, () => {
  it('runs a job in a fresh agent container and removes the container afterwards', async () => {
    const { t, isolation } = await start();
    const [jobId] = await submit(t, {
      build: { runsOn: [NAME], steps: [{ run: 'echo "in $(cat /etc/hostname)"; echo done' }] },
    });
    const job = await t.waitForJob(jobId!, undefined, 90_000);
    expect(job.state).toBe('succeeded');
    const lines = await outputLines(t, jobId!);
    expect(lines).toContain('done');
    // The agent ran inside the container it was spawned in (hostname = container id prefix).
    const host = lines.find((l) => l.startsWith('in '))!.slice(3);
    expect(host).toMatch(/^[0-9a-f]{12}$/);
    expect(isolation.applied).toHaveLength(1);
    expect(isolation.applied[0]!.ip).toMatch(/^172\.30\./);
    await eventually(
      async () => (await scalerContainers(NAME)).length === 0,
      30_000,
      'agent container removed',
    );
    expect(isolation.ruled.size).toBe(0);
  });

  it('runs a container.image job inside that image with the injected agent', async () => {
    const { t } = await start();
    const [jobId] = await submit(t, {
      inimage: {
        runsOn: [NAME],
        container: { image: BUSYBOX_IMAGE },
        steps: [
          {
            run: 'echo "agent=$KICI_JOB_IMAGE_AGENT"; ls /opt/kici; test -e /bin/busybox && echo busybox-here; touch /opt/kici/x 2>/dev/null || echo runtime-read-only',
          },
        ],
      },
    });
    const job = await t.waitForJob(jobId!, undefined, 120_000);
    const lines = await outputLines(t, jobId!);
    expect(job.state, lines.join('\n')).toBe('succeeded');
    expect(lines).toContain('agent=1');
    expect(lines).toContain('busybox-here');
    expect(lines).toContain('runtime-read-only');
    await eventually(
      async () => (await scalerContainers(NAME)).length === 0,
      30_000,
      'job container removed',
    );
  });

  it('shows labels, PidsLimit 4096, memory and CPU limits and the agent network in inspect', async () => {
    const { t } = await start(
      new RecordingIsolation(),
      {},
      [
        {
          labels: [NAME],
          image: process.env.KICI_TEST_AGENT_IMAGE || undefined,
          imagePullPolicy: 'Never',
          resources: { limits: { cpus: 0.5, memory: '256m' } },
        },
      ].map((s) => ({
        ...(containerScaler(NAME).labelSets[0] as object),
        ...Object.fromEntries(Object.entries(s).filter(([, v]) => v !== undefined)),
      })),
    );
    const [jobId] = await submit(t, { hold: { runsOn: [NAME], steps: [{ run: 'echo holding; sleep 6' }] } });
    await eventually(
      async () => (await scalerContainers(NAME)).some((c) => c.State === 'running'),
      60_000,
      'agent running',
    );
    const [c] = await scalerContainers(NAME);
    const info = await docker.getContainer(c!.Id).inspect();
    expect(info.Config.Labels).toMatchObject({
      'kici-managed': 'true',
      'kici-scaler-name': NAME,
      'kici-labels': NAME,
      'kici-bound-job-id': jobId,
    });
    expect(info.Config.Labels['kici-agent-id']).toMatch(/^scaler-/);
    expect(info.Config.Labels['kici-run-id']).toBeTruthy();
    expect(info.HostConfig.PidsLimit).toBe(4096);
    expect(info.HostConfig.Memory).toBe(256 * 1024 * 1024);
    expect(info.HostConfig.NanoCpus).toBe(500_000_000);
    expect(info.HostConfig.AutoRemove).toBe(false);
    // The capabilities that would let a root step read its agent's memory are dropped explicitly.
    // Docker lists what was asked; Podman lists only drops from its own default set, which already
    // lacks these, so there the check is that none of them was granted.
    if (ENGINE === 'docker')
      expect([...(info.HostConfig.CapDrop ?? [])].sort()).toEqual([...AGENT_CONTAINER_CAP_DROP].sort());
    const added = (info.HostConfig.CapAdd ?? []).map((c: string) => c.replace(/^CAP_/, ''));
    for (const cap of AGENT_CONTAINER_CAP_DROP) expect(added).not.toContain(cap);
    expect(Object.keys(info.NetworkSettings.Networks)).toEqual(['kici-agent-net']);
    expect(info.NetworkSettings.Networks['kici-agent-net']!.IPAddress).toMatch(/^172\.30\./);
    expect((await t.waitForJob(jobId!, undefined, 60_000)).state).toBe('succeeded');
    await eventually(
      async () => (await scalerContainers(NAME)).length === 0,
      30_000,
      'agent container removed',
    );
  });

  it('refuses an absent image under imagePullPolicy Never, on the job, without a container', async () => {
    const { t } = await start(new RecordingIsolation(), {}, [
      { labels: [NAME], image: 'kici-test/not-loaded:0', imagePullPolicy: 'Never' },
    ]);
    const [jobId] = await submit(t, { nope: { runsOn: [NAME], steps: [{ run: 'true' }] } });
    const body = await eventually(
      async () => {
        const b = (
          await t.api<{ state: string; lastProvisioningError: string | null }>('GET', `/api/v1/jobs/${jobId}`)
        ).body;
        return b.lastProvisioningError ? b : undefined;
      },
      60_000,
      'a provisioning error on the job',
    );
    expect(body.state).toBe('queued');
    expect(body.lastProvisioningError).toMatch(
      /kici-test\/not-loaded:0 is not on the engine and imagePullPolicy is Never/,
    );
    expect(await scalerContainers(NAME)).toEqual([]);
  });
});
