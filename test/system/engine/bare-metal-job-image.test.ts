/**
 * Bare-metal job-image mode on a real engine (Docker or Podman, per KICI_TEST_ENGINE): a label set
 * with `image` and no `binaryPath` runs a `container.image` job inside that image with our runtime
 * injected, through the container backend's own spawn path. The engine's inspect shows the shared
 * HostConfig (PidsLimit 4096, limits, kici-agent-net, labels); the firewall got a rule set for the
 * container's address and lost it on destroy. After a restart, reapUnowned finds the container by
 * its labels. Construction refuses an unusable nft and a rootless engine, naming both fixes.
 */
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { createNftRunner, NftAgentIsolation } from '../../../src/net/index.js';
import { scalerFileSchema } from '../../../src/config/index.js';
import { createScalerBackend } from '../../../src/scaler/backends/registry.js';
import { systemClock } from '../../../src/util/clock.js';
import { outputLines, submit } from '../../helpers/jobs.js';
import {
  AGENT_IMAGE,
  BUSYBOX_IMAGE,
  docker,
  ENGINE,
  ENGINE_SOCKET,
  RecordingIsolation,
  removeScalerContainers,
  scalerContainers,
} from '../../helpers/engine.js';
import {
  eventually,
  ROOT,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';

const NAME = `bmji-${ENGINE}`;
let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
  await removeScalerContainers(NAME);
});

const scaler = (over: Record<string, unknown> = {}) => ({
  name: NAME,
  type: 'bare-metal',
  maxAgents: 2,
  socketPath: ENGINE_SOCKET,
  labelSets: [
    {
      labels: [NAME],
      image: AGENT_IMAGE,
      imagePullPolicy: 'Never',
      resources: { limits: { cpus: 0.5, memory: '256m' } },
    },
  ],
  ...over,
});

const entryOf = (over: Record<string, unknown> = {}) =>
  scalerFileSchema.parse({ version: 1, scalers: [scaler(over)] }).scalers[0]!;

const deps = (extra: Record<string, unknown>) => ({
  logger: pino({ level: 'silent' }),
  clock: systemClock,
  store: {} as never,
  configPath: `${ROOT}/scalers.yaml`,
  docker,
  engine: { runtime: ENGINE, socketPath: ENGINE_SOCKET, local: true },
  ...extra,
});

describe(`bare-metal job-image mode on ${ENGINE}`, () => {
  it('runs a container.image job in that image with the shared HostConfig, rules per container IP', async () => {
    const isolation = new RecordingIsolation();
    t = await startTestOrchestrator({
      host: '0.0.0.0',
      isolation,
      config: { version: 1, scalers: [scaler()] },
    });
    const [jobId] = await submit(t, {
      inimage: {
        runsOn: [NAME],
        container: { image: BUSYBOX_IMAGE },
        steps: [
          {
            run: 'echo "agent=$KICI_JOB_IMAGE_AGENT"; test -e /bin/busybox && echo busybox-here; echo holding; sleep 4',
          },
        ],
      },
    });
    await eventually(
      async () => (await scalerContainers(NAME)).some((c) => c.State === 'running'),
      60_000,
      'job-image agent running',
    ).catch(async (err: unknown) => {
      const j = await t!.api('GET', `/api/v1/jobs/${jobId}`);
      const logs = await t!.api<{ lines: { line: string }[] }>('GET', `/api/v1/jobs/${jobId}/logs`);
      throw new Error(
        `${String(err)}\n${JSON.stringify(j.body)}\n${logs.body.lines.map((l) => l.line).join('\n')}`,
      );
    });
    const [c] = await scalerContainers(NAME);
    const info = await docker.getContainer(c!.Id).inspect();
    // Podman names a local image with its localhost/ registry.
    expect(info.Config.Image.replace(/^localhost\//, '')).toBe(BUSYBOX_IMAGE);
    expect(info.Config.Labels).toMatchObject({
      'kici-managed': 'true',
      'kici-scaler-name': NAME,
      'kici-labels': NAME,
    });
    expect(info.Config.Env).toContain('KICI_JOB_IMAGE_AGENT=1');
    expect(info.HostConfig.PidsLimit).toBe(4096);
    expect(info.HostConfig.Memory).toBe(256 * 1024 * 1024);
    expect(info.HostConfig.NanoCpus).toBe(500_000_000);
    expect(info.HostConfig.AutoRemove).toBe(false);
    expect((info.HostConfig.Binds ?? []).some((b) => b.includes(':/opt/kici:ro'))).toBe(true);
    expect(Object.keys(info.NetworkSettings.Networks)).toEqual(['kici-agent-net']);
    const ip = info.NetworkSettings.Networks['kici-agent-net']!.IPAddress;
    // The container runs before its rules are in (the agent waits at its start gate meanwhile).
    await eventually(() => isolation.applied.length > 0, 30_000, 'the agent address to get its rules');
    expect(isolation.applied.map((a) => a.ip)).toEqual([ip]);
    expect(isolation.applied[0]!.scalerName).toBe(NAME);

    const job = await t.waitForJob(jobId!, undefined, 120_000);
    const lines = await outputLines(t, jobId!);
    expect(job.state, lines.join('\n')).toBe('succeeded');
    expect(lines).toContain('agent=1');
    expect(lines).toContain('busybox-here');
    await eventually(
      async () => (await scalerContainers(NAME)).length === 0,
      60_000,
      'container removed',
    ).catch(async (err: unknown) => {
      const left = (await scalerContainers(NAME)).map((x) => `${x.Id.slice(0, 12)} ${x.State} ${x.Status}`);
      throw new Error(
        `${String(err)}; left: ${left.join(', ')}; entries: ${JSON.stringify(t!.orch.scaler!.entries())}`,
      );
    });
    expect(isolation.ruled.size).toBe(0);
  });

  it('with the real nftables isolation: the agent address has its rule set while it runs, none after', async () => {
    const runner = createNftRunner({});
    const isolation = new NftAgentIsolation({ runner, table: `kici_bmji_${ENGINE}` });
    try {
      t = await startTestOrchestrator({
        host: '0.0.0.0',
        isolation,
        config: { version: 1, scalers: [scaler()] },
      });
      const [jobId] = await submit(t, {
        ruled: { runsOn: [NAME], container: { image: BUSYBOX_IMAGE }, steps: [{ run: 'echo up; sleep 3' }] },
      });
      await eventually(
        async () => (await scalerContainers(NAME)).some((c) => c.State === 'running'),
        60_000,
        'job-image agent running',
      );
      const [c] = await scalerContainers(NAME);
      const ip = (await docker.getContainer(c!.Id).inspect()).NetworkSettings.Networks['kici-agent-net']!
        .IPAddress;
      await eventually(async () => (await isolation.listRuled()).includes(ip), 30_000, `rules for ${ip}`);
      const job = await t.waitForJob(jobId!, undefined, 120_000);
      expect(job.state, (await outputLines(t, jobId!)).join('\n')).toBe('succeeded');
      await eventually(async () => (await scalerContainers(NAME)).length === 0, 60_000, 'container removed');
      expect(await isolation.listRuled()).not.toContain(ip);
    } finally {
      await t?.stop();
      t = undefined;
      await runner
        .run([{ delete: { table: { family: 'inet', name: isolation.spec.table } } }])
        .catch(() => {});
    }
  });

  it('after a restart, reapUnowned reclaims a job-image container from its labels only', async () => {
    const isolation = new RecordingIsolation();
    const created = await docker.createContainer({
      Image: BUSYBOX_IMAGE,
      Cmd: ['sleep', '60'],
      Labels: {
        'kici-managed': 'true',
        'kici-scaler-name': NAME,
        'kici-agent-id': 'scaler-bare-metal-ji000001',
      },
    });
    await created.start();
    const backend = await createScalerBackend(entryOf(), deps({ isolation }));
    // Another id (or another scaler's container) is not ours to remove.
    expect(await backend.reapUnowned!('scaler-bare-metal-ji000002', null)).toBe(false);
    expect((await scalerContainers(NAME)).length).toBe(1);
    expect(await backend.reapUnowned!('scaler-bare-metal-ji000001', null)).toBe(true);
    expect((await scalerContainers(NAME)).length).toBe(0);
  });

  it('refuses to start when nft is unusable, naming root/CAP_NET_ADMIN and requireSudo + NOPASSWD', async () => {
    const broken = new NftAgentIsolation({
      runner: createNftRunner({ command: 'kici-no-such-nft' }),
      table: 'kici_bmji_never',
    });
    const err = await createScalerBackend(entryOf(), deps({ isolation: broken })).catch((e: unknown) => e);
    expect(String((err as Error).message)).toMatch(/job-image label sets need a usable nft/);
    expect(String((err as Error).message)).toMatch(
      /root \(or with CAP_NET_ADMIN\).*requireSudo: true with a NOPASSWD sudoers entry for nft/,
    );
    const none = await createScalerBackend(entryOf(), deps({})).catch((e: unknown) => e);
    expect(String((none as Error).message)).toMatch(/need nftables.*CAP_NET_ADMIN.*NOPASSWD/);
  });

  it('refuses a rootless engine with the same two fixes (the engine reports it in SecurityOptions)', async () => {
    // The real engine, with only its info answer changed: no rootless engine runs in this tier.
    const rootless = new Proxy(docker, {
      get(target, prop, recv) {
        if (prop === 'info')
          return async () => ({
            ...(await target.info()),
            SecurityOptions: ['name=seccomp', 'name=rootless'],
          });
        return Reflect.get(target, prop, recv) as unknown;
      },
    });
    const err = await createScalerBackend(
      entryOf(),
      deps({ docker: rootless, isolation: new RecordingIsolation() }),
    ).catch((e: unknown) => e);
    expect(String((err as Error).message)).toMatch(/rootless.*CAP_NET_ADMIN.*NOPASSWD/);
  });
});
