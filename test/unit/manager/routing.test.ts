/**
 * Label matching through the manager: which label set a job lands on, and which labels the spawned
 * agent (and its token) carries. Every test goes through `requestScale` or the dispatcher, so the
 * routing table the manager builds from the config is what is under test.
 */
import { describe, expect, it } from 'vitest';
import type { ScaleJob } from '../../../src/scaler/types.js';
import { spawnToken } from '../../helpers/harness-agents.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
let seq = 0;
const job = (runsOn: string[], extra: Partial<ScaleJob> = {}): ScaleJob => ({
  id: `job-${++seq}`,
  runId: 'run-1',
  runsOn,
  ...extra,
});

async function where(h: ManagerHarness, j: ScaleJob): Promise<string> {
  const r = await h.manager.requestScale(j);
  if (r.action !== 'spawning') return r.action;
  await h.settle();
  const req = h.backend(r.scalerName).requestFor(r.agentId);
  return `${r.scalerName}[${req?.labelSet.join(',')}]`;
}

describe('label matching', () => {
  it('picks the most specific label set; a tie goes to the first in config order', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: {
        version: 1,
        scalers: [
          bareMetal('wide', [
            ['linux', 'docker', 'big'],
            ['linux', 'ssd'],
          ]),
          bareMetal('narrow', [
            ['linux', 'docker'],
            ['linux', 'gpu'],
          ]),
        ],
      },
    });
    expect(await where(h, job(['linux', 'docker']))).toBe('narrow[linux,docker]');
    expect(await where(h, job(['big']))).toBe('wide[linux,docker,big]');
    // Three sets of size 2 contain "linux": wide[linux,ssd] comes first in config order.
    expect(await where(h, job(['linux']))).toBe('wide[linux,ssd]');
    expect(await where(h, job(['linux', 'gpu', 'docker']))).toBe('no-backend');
  });

  it('a job with no labels goes to the first ungated label set', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: {
        version: 1,
        scalers: [
          bareMetal('gated', [['secure']], { mandatoryLabels: ['secure'] }),
          bareMetal('open', [['linux']]),
        ],
      },
    });
    expect(await where(h, job([]))).toBe('open[linux]');
  });

  it('matches case-insensitively through the dispatcher (labels folded at submit)', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['Linux', 'DOCKER']])] } });
    await h.submit({ a: { runsOn: ['LINUX', ' Docker '] } });
    expect(h.backend('alpha').spawns.map((s) => s.labelSet)).toEqual([['linux', 'docker']]);
  });

  it('requestScale itself folds the job labels (target = lowercased job labels)', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: { version: 1, scalers: [bareMetal('alpha', [['linux', 'docker']])] },
    });
    expect(await where(h, job(['LINUX', 'Docker']))).toBe('alpha[linux,docker]');
    expect(await where(h, job(['linux'], { excludeLabels: ['DOCKER'] }))).toBe('no-backend');
  });

  it('mandatoryLabels gate a label set: the job must name every gate label', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: {
        version: 1,
        scalers: [bareMetal('secure', [['linux', 'secure']], { mandatoryLabels: ['Secure'] })],
      },
    });
    expect(await where(h, job(['linux']))).toBe('no-backend');
    expect(await where(h, job(['linux', 'secure']))).toBe('secure[linux,secure]');
  });

  it('a gated set is skipped for a job without its gate, even when it is the more specific one', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: {
        version: 1,
        scalers: [
          bareMetal('open', [['linux', 'x', 'y']]),
          bareMetal('secure', [['linux', 'hsm']], { mandatoryLabels: ['hsm'] }),
        ],
      },
    });
    expect(await where(h, job(['linux']))).toBe('open[linux,x,y]');
    expect(await where(h, job(['linux', 'hsm']))).toBe('secure[linux,hsm]');
  });

  it('platform taints gate the set and are carried by the agent', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: {
        version: 1,
        scalers: [bareMetal('win', [['build']], { platform: { os: 'windows', arch: 'arm64' } })],
      },
    });
    expect(await where(h, job(['build']))).toBe('no-backend');
    expect(await where(h, job(['build', 'windows']))).toBe('no-backend');
    expect(await where(h, job(['build', 'windows', 'arm64']))).toBe('win[build]');
    const req = h.backend('win').spawns[0]!;
    expect(req.fullLabels).toEqual(expect.arrayContaining(['windows', 'arm64', 'build']));
    expect(h.manager.entries()[0]!.gate).toEqual(['windows', 'arm64']);
  });

  it('the roles table: build → builder, init → init-runner, roles [] carries no role label', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: {
        version: 1,
        scalers: [
          bareMetal('exec-only', [['a']], { roles: [] }),
          bareMetal('builders', [['b']], { roles: ['builder'] }),
          bareMetal('inits', [['c']], { roles: ['init-runner'] }),
          bareMetal('all', [['d']], { roles: ['all'] }),
          bareMetal('default', [['e']]),
        ],
      },
    });
    expect(await where(h, job(['a']))).toBe('exec-only[a]');
    expect(await where(h, job(['a'], { role: 'build' }))).toBe('no-backend');
    expect(await where(h, job(['a'], { role: 'init' }))).toBe('no-backend');
    expect(await where(h, job(['b'], { role: 'build' }))).toBe('builders[b]');
    expect(await where(h, job(['b'], { role: 'init' }))).toBe('no-backend');
    expect(await where(h, job(['c'], { role: 'init' }))).toBe('inits[c]');
    expect(await where(h, job(['c'], { role: 'build' }))).toBe('no-backend');
    expect(await where(h, job(['d'], { role: 'build' }))).toBe('all[d]');
    expect(await where(h, job(['e'], { role: 'init' }))).toBe('default[e]');
    const roleLabels = (name: string) =>
      h.backend(name).spawns[0]!.fullLabels.filter((l) => l.startsWith('kici:role:'));
    expect(roleLabels('exec-only')).toEqual([]);
    expect(roleLabels('builders')).toEqual(['kici:role:execution', 'kici:role:builder']);
    expect(roleLabels('inits')).toEqual(['kici:role:execution', 'kici:role:init-runner']);
    expect(roleLabels('default')).toEqual([
      'kici:role:execution',
      'kici:role:builder',
      'kici:role:init-runner',
    ]);
  });

  it('excludeLabels veto a label set, including by its auto labels', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: {
        version: 1,
        scalers: [bareMetal('alpha', [['linux']]), bareMetal('beta', [['linux', 'ssd']])],
      },
    });
    expect(await where(h, job(['linux']))).toBe('alpha[linux]');
    expect(await where(h, job(['linux'], { excludeLabels: ['kici:scaler:alpha'] }))).toBe('beta[linux,ssd]');
    expect(await where(h, job(['linux'], { excludeLabels: ['kici:scaler:alpha', 'ssd'] }))).toBe(
      'no-backend',
    );
    expect(await where(h, job(['linux'], { excludeLabels: ['kici:agent:bare-metal'] }))).toBe('no-backend');
  });

  it('excludeLabels from the run file reach the scaler through the dispatcher', async () => {
    const h = await hs.make({
      config: {
        version: 1,
        scalers: [bareMetal('alpha', [['linux']]), bareMetal('beta', [['linux', 'ssd']])],
      },
    });
    await h.submit({ a: { runsOn: ['linux'], excludeLabels: ['KICI:SCALER:ALPHA'] } });
    expect(h.backend('alpha').spawns).toHaveLength(0);
    expect(h.backend('beta').spawns).toHaveLength(1);
  });
});

describe('excludeLabels at dispatch', () => {
  it('an idle agent carrying an excluded label never takes the job, even when a sibling job could use it', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux', 'clean']])] } });
    await h.registerStatic('static-1', ['linux', 'dirty']);
    await h.registerStatic('static-2', ['linux', 'dirty']);
    // Same runsOn, so both jobs share a queue group; only the second excludes "dirty".
    const { byName } = await h.submit({
      any: { runsOn: ['linux'] },
      picky: { runsOn: ['linux'], excludeLabels: ['dirty'] },
    });
    const onStatic = [...h.assigned('static-1'), ...h.assigned('static-2')];
    expect(onStatic).toContain(byName.any);
    expect(onStatic).not.toContain(byName.picky);
    // The picky job is provisioned on the clean scaler instead.
    expect(h.backend('alpha').spawns.map((s) => s.boundJobId)).toEqual([byName.picky]);
  });

  it('an idle agent that fits a later job of the group is used even when the first job excludes it', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux', 'clean']])] } });
    await h.registerStatic('static-1', ['linux', 'dirty']);
    const { byName } = await h.submit({
      picky: { runsOn: ['linux'], excludeLabels: ['dirty'] },
      any: { runsOn: ['linux'] },
    });
    expect(h.assigned('static-1')).toEqual([byName.any]);
    expect(h.backend('alpha').spawns.map((s) => s.boundJobId)).toEqual([byName.picky]);
  });
});

describe('no-backend verdicts are per job', () => {
  it('a servable job is not settled no-backend because an earlier job of its group excludes every label set', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    const { byName } = await h.submit({
      picky: { runsOn: ['linux'], excludeLabels: ['kici:scaler:alpha'] },
      any: { runsOn: ['linux'] },
    });
    expect(await h.jobState(byName.picky!)).toBe('no-backend');
    expect(await h.jobState(byName.any!)).toBe('queued');
    expect(h.backend('alpha').spawns.map((s) => s.boundJobId)).toEqual([byName.any]);
  });

  it('an unservable job is settled no-backend even when an earlier job of its group is servable', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    const { byName } = await h.submit({
      any: { runsOn: ['linux'] },
      picky: { runsOn: ['linux'], excludeLabels: ['kici:scaler:alpha'] },
    });
    await h.sweep();
    expect(h.backend('alpha').spawns.map((s) => s.boundJobId)).toEqual([byName.any]);
    expect(await h.jobState(byName.picky!)).toBe('no-backend');
  });
});

describe('agent identity and token', () => {
  it('fullLabels = declared + kici:agent + kici:scaler + roles + taints, and the token is bound to exactly those', async () => {
    const h = await hs.make({
      agentTokenTtlMs: 120_000,
      config: {
        version: 1,
        scalers: [
          bareMetal('mac', [['xcode', 'Big']], {
            platform: { os: 'macos', arch: 'arm64' },
            roles: ['builder'],
          }),
        ],
      },
    });
    const { ids } = await h.submit({ a: { runsOn: ['xcode', 'big', 'macos', 'arm64'] } });
    const req = h.backend('mac').spawns[0]!;
    expect(req.boundJobId).toBe(ids[0]);
    expect([...req.fullLabels].sort()).toEqual(
      [
        'arm64',
        'big',
        'kici:agent:bare-metal',
        'kici:role:builder',
        'kici:role:execution',
        'kici:scaler:mac',
        'macos',
        'xcode',
      ].sort(),
    );
    expect(req.labelSet).toEqual(['xcode', 'big']);
    expect(req.agentId).toMatch(/^scaler-bare-metal-[0-9a-f]{8}$/);
    const rows = await h.store.db
      .selectFrom('agent_tokens')
      .selectAll()
      .where('agent_id', '=', req.agentId)
      .execute();
    expect(rows).toHaveLength(1);
    expect(rows[0]!.kind).toBe('ephemeral');
    expect([...rows[0]!.labels].sort()).toEqual([...req.fullLabels].sort());
    expect(rows[0]!.expires_at!.getTime()).toBe(h.clock.now() + 120_000);
    const check = await h.store.tokens.check(spawnToken(req), new Date(h.clock.now()));
    expect(check).toMatchObject({ ok: true, agentId: req.agentId });
    // The agent may add only self-reported facts; a label outside the token is refused.
    h.backend('mac').resolveSpawn(req.agentId);
    await h.settle();
    const refused = await h.registerAgent(req.agentId, { labels: [...req.fullLabels, 'gpu'] });
    expect(refused).toEqual({ ok: false, reason: "labels outside the token's scope: gpu" });
    const ok = await h.registerAgent(req.agentId, { labels: [...req.fullLabels, 'kici:os:macos'] });
    expect(ok.ok).toBe(true);
  });

  it('every spawn carries the orchestrator URL, its bound job and run, and no limits when none resolve', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    const { runId, ids } = await h.submit({ a: { runsOn: ['linux'] }, b: { runsOn: ['linux'] } });
    const reqs = h.backend('alpha').spawns;
    expect(reqs.map((r) => r.boundJobId).sort()).toEqual([...ids].sort());
    for (const r of reqs) {
      expect(r.runId).toBe(runId);
      expect(r.orchestratorUrl).toBe('ws://127.0.0.1:1/ws');
      expect(r.limits).toBeUndefined();
      expect(r.fullLabels).toEqual(
        expect.arrayContaining(['kici:agent:bare-metal', 'kici:scaler:alpha', 'kici:role:execution']),
      );
    }
    expect(new Set(reqs.map((r) => r.agentId)).size).toBe(2);
    expect(new Set(reqs.map((r) => spawnToken(r))).size).toBe(2);
  });
});
