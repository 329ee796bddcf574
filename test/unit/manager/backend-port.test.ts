/**
 * The manager's side of the backend port: what a spawn context carries, which reason each destroy
 * gives, a reload that checks every backend before applying anything, and a shutdown that leaves
 * a cluster-lifetime backend's agents alone.
 */
import { describe, expect, it } from 'vitest';
import { platformToTaints } from '../../../src/config/index.js';
import type { BackendDescriptor } from '../../../src/scaler/backends/descriptor.js';
import { buildBackend } from '../../../src/scaler/backends/registry.js';
import { systemClock } from '../../../src/util/clock.js';
import { pino } from 'pino';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { RecordingBackend } from '../../helpers/recording-backend.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();

async function spawnAndRegister(h: ManagerHarness, runsOn: string[], extra: Record<string, unknown> = {}) {
  const { ids } = await h.submit({ j: { runsOn, ...extra } });
  const req = h.allSpawns().at(-1)!;
  h.backendOf(req.agentId)!.resolveSpawn(req.agentId);
  await h.settle();
  const r = await h.registerAgent(req.agentId);
  if (!r.ok) throw new Error(r.reason);
  return { jobId: ids[0]!, agentId: req.agentId, req };
}

describe('spawn context', () => {
  it('carries a token, the bound job and run, the mandatory labels, the platform taints and the job image', async () => {
    const platform = { os: 'macos', arch: 'arm64' } as const;
    const h = await hs.make({
      config: {
        version: 1,
        scalers: [
          {
            name: 'img',
            type: 'bare-metal',
            maxAgents: 2,
            mandatoryLabels: ['gpu'],
            platform,
            labelSets: [{ labels: ['ci', 'gpu'], image: 'ci/agent:1' }],
          },
        ],
      },
    });
    const taints = platformToTaints(platform);
    const { ids, runId } = await h.submit({
      j: { runsOn: ['ci', 'gpu', ...taints], container: { image: 'node:24' } },
    });
    const [req] = h.backend('img').spawns;
    expect(req).toMatchObject({
      boundJobId: ids[0],
      runId,
      image: 'node:24',
      mandatoryLabels: ['gpu', ...taints],
      taints,
      auth: { kind: 'token' },
    });
    expect(req!.auth.kind === 'token' && req!.auth.token.length > 20).toBe(true);
    expect(taints.length).toBeGreaterThan(0);
  });

  it('hands the backend the job image’s registry credentials as references, never values', async () => {
    const h = await hs.make({
      config: {
        version: 1,
        scalers: [
          { name: 'img', type: 'bare-metal', maxAgents: 1, labelSets: [{ labels: ['ci'], image: 'a:1' }] },
        ],
      },
    });
    const auth = { tokenSecret: 'ci:ghcr-token', usernameValue: 'bot', registry: 'ghcr.io' };
    await h.submit({ j: { runsOn: ['ci'], container: { image: 'ghcr.io/o/i:1', auth } } });
    const [req] = h.backend('img').spawns;
    expect(req).toMatchObject({ image: 'ghcr.io/o/i:1', imageAuth: auth });
  });
});

describe('destroy reasons', () => {
  it('a dropped warm pool reaps its idle agents as `idle`, not `shutdown`', async () => {
    const warm = (enabled: boolean) =>
      scalerConfig({
        version: 1,
        scalers: [
          bareMetal('w', [{ labels: ['linux'], resources: { requests: { cpus: 1 } } }], {
            warmPool: { enabled, size: 1, idleTimeoutSeconds: 60 },
          }),
        ],
      });
    const h = await hs.make({ config: warm(true) });
    h.manager.warm.start();
    await h.settle();
    const b = h.backend('w');
    const [id] = b.pendingIds();
    b.resolveSpawn(id!);
    await h.settle();
    expect((await h.registerAgent(id!)).ok).toBe(true);
    expect((await h.manager.reload(warm(false), h.factory)).result).toBe('applied');
    await h.settle();
    expect(b.destroys).toEqual([{ agentId: id, reason: 'idle', known: true }]);
  });

  it('an agent closed for a missed heartbeat is destroyed as `heartbeat-timeout`', async () => {
    const h = await hs.make({
      config: { version: 1, scalers: [bareMetal('a', [['linux']])] },
      killOnDestroy: false,
    });
    const { agentId } = await spawnAndRegister(h, ['linux']);
    await h.manager.onAgentDisconnected(agentId, 'heartbeat-timeout');
    expect(h.backend('a').destroys).toEqual([{ agentId, reason: 'heartbeat-timeout', known: true }]);
  });
});

describe('reload: check every backend, then apply; nothing to roll back', () => {
  const three = (maxB: number, bLabels: Record<string, unknown>[] = [{ labels: ['b'] }]) =>
    scalerConfig({
      version: 1,
      scalers: [bareMetal('a', [['a']], { maxAgents: 4 }), bareMetal('b', bLabels, { maxAgents: maxB })],
    });

  it('one refusing backend means no backend applies anything', async () => {
    const h = await hs.make({ config: three(1) });
    h.backend('b').refuseReload = ['not today'];
    const before = h.backend('a').entry;
    const out = await h.manager.reload(three(3), h.factory);
    expect(out).toEqual({ result: 'rejected', problems: ['scaler "b": not today'] });
    expect(h.backend('a').applied).toEqual([]);
    expect(h.backend('b').applied).toEqual([]);
    expect(h.backend('a').entry).toBe(before);
    expect(h.backend('a').reloads.every((r) => r.valid)).toBe(true);
  });

  it('a bad label set is refused by the backend check, naming the scaler and the field', async () => {
    const h = await hs.make({ config: three(1) });
    const out = await h.manager.reload(three(1, [{ labels: ['b'] }, { labels: ['B '] }]), h.factory);
    expect(out.result).toBe('rejected');
    expect(out.result === 'rejected' && out.problems).toEqual([
      'scaler "b": labelSets[1]: same labels as labelSets[0] ([b])',
    ]);
    expect(h.backend('b').applied).toEqual([]);
  });

  it('when every check passes, each kept backend applies its new entry exactly once', async () => {
    const h = await hs.make({ config: three(1) });
    const next = three(3);
    expect((await h.manager.reload(next, h.factory)).result).toBe('applied');
    expect(h.backend('a').applied).toEqual([next.scalers[0]]);
    expect(h.backend('b').applied).toEqual([next.scalers[1]]);
    expect(h.backend('b').maxAgents).toBe(3);
  });

  it('a reload adding a scaler whose required tool is missing is refused, and the current config stays', async () => {
    const h = await hs.make({ config: three(1) });
    const needsNft: BackendDescriptor = {
      type: 'bare-metal',
      requiredTools: () => [
        {
          name: 'nft',
          find: { kind: 'command', command: 'kici-no-such-nft' },
          fix: 'install nftables',
          severity: 'fatal',
        },
      ],
      create: (entry) => Promise.resolve(new RecordingBackend(entry)),
    };
    const deps = {
      logger: pino({ level: 'silent' }),
      clock: systemClock,
      store: h.store,
      configPath: '/x/s.yaml',
    };
    const next = scalerConfig({
      version: 1,
      scalers: [...three(1).scalers, bareMetal('c', [['c']])],
    });
    const out = await h.manager.reload(next, (entry) => buildBackend(needsNft, entry, deps));
    expect(out).toEqual({
      result: 'rejected',
      problems: ['scaler "c": nft: kici-no-such-nft was not found on PATH. Fix: install nftables'],
    });
    expect(h.manager.config.scalers.map((s) => s.name)).toEqual(['a', 'b']);
    expect(h.manager.routingTable().map((r) => r.scalerName)).not.toContain('c');
    expect(h.backend('a').applied).toEqual([]);
  });
});

describe('shutdown honours the backend lifetime', () => {
  it("a cluster-lifetime backend's agents are neither destroyed nor forgotten in the store", async () => {
    const h = await hs.make({
      config: { version: 1, scalers: [bareMetal('ev', [['linux']])] },
      configureBackend: (b) => {
        b.capabilities.lifetime = 'cluster';
      },
    });
    const { agentId } = await spawnAndRegister(h, ['linux']);
    await h.manager.shutdownAll(1_000);
    expect(h.backend('ev').destroys).toEqual([]);
    expect(h.backend('ev').agents.has(agentId)).toBe(true);
    expect((await h.spawnRows()).map((r) => r.agent_id)).toEqual([agentId]);
  });

  it("an orchestrator-lifetime backend's agents are destroyed as `shutdown`", async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('bm', [['linux']])] } });
    const { agentId } = await spawnAndRegister(h, ['linux']);
    await h.manager.shutdownAll(1_000);
    expect(h.backend('bm').destroys).toContainEqual({ agentId, reason: 'shutdown', known: true });
    expect(await h.spawnRows()).toEqual([]);
  });
});
