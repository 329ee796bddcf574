import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  canonicalizeLabels,
  foldLabel,
  loadScalerConfig,
  scalerFileSchema,
  type ScalerConfig,
  type ScalerEntry,
} from '../../../src/config/index.js';
import {
  agentLabelsFor,
  buildRoutingTable,
  findLabelSet,
  roleLabelsFor,
  roleRequirement,
  type HostFacts,
  type JobRole,
  type RoutableLabelSet,
  type RouteQuery,
} from '../../../src/scaler/core/routing.js';

const LINUX_X64: HostFacts = { os: 'linux', arch: 'x64' };

type Entry = Record<string, unknown>;

/** An event scaler needs the least configuration, so it carries most of the routing cases. */
function eventScaler(name: string, sets: string[][], extra: Entry = {}): Entry {
  return {
    name,
    type: 'event',
    maxAgents: 4,
    provisioningTargets: ['job:provision.yaml'],
    labelSets: sets.map((labels) => ({ labels })),
    ...extra,
  };
}

function parseConfig(...scalers: Entry[]): ScalerConfig {
  return scalerFileSchema.parse({ version: 1, scalers });
}

function tableOf(...scalers: Entry[]): RoutableLabelSet[] {
  return buildRoutingTable(parseConfig(...scalers), { host: LINUX_X64 });
}

/** Route with canonical inputs, as the dispatcher does, and name the hit as `scaler#index`. */
function route(
  table: readonly RoutableLabelSet[],
  labels: string[],
  extra: { role?: JobRole; exclude?: string[] } = {},
): string | undefined {
  const query: RouteQuery = { labels: canonicalizeLabels(labels) };
  if (extra.role) query.role = extra.role;
  if (extra.exclude) query.exclude = canonicalizeLabels(extra.exclude);
  const hit = findLabelSet(query, table);
  return hit ? `${hit.scalerName}#${hit.index}` : undefined;
}

describe('findLabelSet: subset matching and specificity', () => {
  const table = tableOf(
    eventScaler('wide', [['linux', 'docker', 'big']]),
    eventScaler('narrow', [
      ['linux', 'docker'],
      ['linux', 'ssd'],
    ]),
    eventScaler('other', [['linux', 'gpu']]),
  );

  it.each([
    { labels: ['linux'], want: 'narrow#0', why: 'the first of the two-label sets wins the tie' },
    {
      labels: ['linux', 'docker'],
      want: 'narrow#0',
      why: 'smaller declared set beats the earlier, larger one',
    },
    { labels: ['docker', 'big'], want: 'wide#0', why: 'only the wide set has "big"' },
    { labels: ['ssd'], want: 'narrow#1', why: 'the second set of a scaler is reachable' },
    { labels: ['gpu', 'linux'], want: 'other#0', why: 'label order does not matter' },
    { labels: ['linux', 'gpu', 'docker'], want: undefined, why: 'no set has all three' },
    { labels: ['windows'], want: undefined, why: 'an unknown label matches nothing' },
  ])('$labels → $want ($why)', ({ labels, want }) => {
    expect(route(table, labels)).toBe(want);
  });

  it('keeps the first set when several of equal size match, in scaler order then set order', () => {
    const t = tableOf(
      eventScaler('a', [
        ['x', 'q'],
        ['x', 'r'],
      ]),
      eventScaler('b', [['x', 's']]),
    );
    expect(route(t, ['x'])).toBe('a#0');
    const reordered = tableOf(
      eventScaler('b', [['x', 's']]),
      eventScaler('a', [
        ['x', 'q'],
        ['x', 'r'],
      ]),
    );
    expect(route(reordered, ['x'])).toBe('b#0');
  });

  it('compares declared sizes only, not the auto labels every set carries', () => {
    // "roles: []" gives the second scaler fewer auto labels; its declared set is still larger.
    const t = tableOf(
      eventScaler('full', [['x', 'y']]),
      eventScaler('lean', [['x', 'y', 'z']], { roles: [] }),
    );
    expect(route(t, ['x'])).toBe('full#0');
  });

  it('matches case-insensitively once the job labels are canonical', () => {
    const t = tableOf(eventScaler('mixed', [['Linux', 'DOCKER']]));
    expect(route(t, ['LINUX', ' docker '])).toBe('mixed#0');
    expect(t[0]!.declared).toEqual(['linux', 'docker']);
    expect(t[0]!.key).toBe('docker,linux');
  });
});

describe('findLabelSet: auto labels', () => {
  it('lets a job ask for a scaler, an agent type or an os/arch by its kici: label', () => {
    const t = tableOf(eventScaler('first', [['linux']]), eventScaler('second', [['linux']]));
    expect(route(t, ['linux', 'kici:scaler:second'])).toBe('second#0');
    expect(route(t, ['kici:agent:event'])).toBe('first#0');
    expect(route(t, ['kici:agent:container'])).toBeUndefined();
    expect(route(t, ['kici:os:linux', 'kici:arch:amd64'])).toBe('first#0');
  });

  it('matches kici:scaler:<name> for a scaler whose name has capitals', () => {
    // Labels reach routing folded to lowercase; the scaler label must be folded too.
    const t = tableOf(eventScaler('GPU-Pool', [['linux']]));
    expect(route(t, ['linux', 'kici:scaler:GPU-Pool'])).toBe('GPU-Pool#0');
    for (const ls of t) for (const l of ls.labels) expect(l).toBe(foldLabel(l));
  });

  it('derives os/arch labels from the declared platform first, then from the host for bare-metal', () => {
    const config = parseConfig(
      {
        name: 'bm',
        type: 'bare-metal',
        maxAgents: 1,
        labelSets: [{ labels: ['metal'], binaryPath: '/bin/agent' }],
      },
      { name: 'ct', type: 'container', maxAgents: 1, labelSets: [{ labels: ['box'], image: 'agent:1' }] },
      eventScaler('win', [['build']], { platform: { os: 'windows', arch: 'x64' } }),
    );
    const onMac = buildRoutingTable(config, { host: { os: 'darwin', arch: 'arm64' } });
    const labels = (name: string) =>
      [...onMac.find((t) => t.scalerName === name)!.labels].filter((l) => /^kici:(os|arch):/.test(l)).sort();
    expect(labels('bm')).toEqual(['kici:arch:arm64', 'kici:os:darwin', 'kici:os:macos']);
    // Container and event pools run linux unless declared otherwise, on the host's arch.
    expect(labels('ct')).toEqual(['kici:arch:arm64', 'kici:os:linux']);
    expect(labels('win')).toEqual(['kici:arch:amd64', 'kici:arch:x64', 'kici:os:win32', 'kici:os:windows']);
  });

  it('omits scalers named in the exclude option', () => {
    const config = parseConfig(eventScaler('a', [['x']]), eventScaler('b', [['x']]));
    const t = buildRoutingTable(config, { host: LINUX_X64, exclude: new Set(['a']) });
    expect(t.map((s) => s.scalerName)).toEqual(['b']);
    expect(route(t, ['x'])).toBe('b#0');
  });
});

describe('findLabelSet: gates (mandatoryLabels and platform taints)', () => {
  it('refuses a gated set to a job that does not name every gate label', () => {
    const t = tableOf(eventScaler('gpu', [['linux', 'gpu', 'cuda']], { mandatoryLabels: ['GPU', 'cuda'] }));
    expect(t[0]!.gate).toEqual(['gpu', 'cuda']);
    expect(route(t, ['linux'])).toBeUndefined();
    expect(route(t, ['linux', 'gpu'])).toBeUndefined();
    expect(route(t, ['linux', 'gpu', 'cuda'])).toBe('gpu#0');
  });

  it('sends untainted work to the ungated pool even when the gated one is more specific', () => {
    const t = tableOf(
      eventScaler('general', [['linux', 'docker', 'big']]),
      eventScaler('special', [['linux', 'secure']], { mandatoryLabels: ['secure'] }),
    );
    expect(route(t, ['linux'])).toBe('general#0');
    expect(route(t, ['linux', 'secure'])).toBe('special#0');
  });

  it.each([
    { platform: { os: 'linux', arch: 'x64' }, gate: [] as string[], taints: [] as string[] },
    { platform: { os: 'linux', arch: 'arm64' }, gate: ['arm64'], taints: ['arm64'] },
    { platform: { os: 'macos', arch: 'arm64' }, gate: ['macos', 'arm64'], taints: ['macos', 'arm64'] },
    { platform: { os: 'windows', arch: 'x64' }, gate: ['windows'], taints: ['windows'] },
  ])('platform $platform.os/$platform.arch gates with $gate', ({ platform, gate, taints }) => {
    const t = tableOf(eventScaler('p', [['build']], { platform }));
    expect(t[0]!.gate).toEqual(gate);
    expect(t[0]!.taints).toEqual(taints);
    for (const taint of gate) expect(t[0]!.labels.has(taint)).toBe(true);
    expect(route(t, ['build'])).toBe(gate.length === 0 ? 'p#0' : undefined);
    expect(route(t, ['build', ...gate])).toBe('p#0');
  });
});

describe('findLabelSet: exclusions, roles and the empty job', () => {
  it('vetoes a set that carries any excluded label, declared or automatic', () => {
    const t = tableOf(eventScaler('a', [['x', 'slow']]), eventScaler('b', [['x', 'y', 'z']]));
    expect(route(t, ['x'])).toBe('a#0');
    expect(route(t, ['x'], { exclude: ['SLOW'] })).toBe('b#0');
    expect(route(t, ['x'], { exclude: ['kici:scaler:a'] })).toBe('b#0');
    expect(route(t, ['x'], { exclude: ['kici:agent:event'] })).toBeUndefined();
  });

  it('routes role jobs only to scalers that serve the role', () => {
    const t = tableOf(
      eventScaler('exec-only', [['x']], { roles: [] }),
      eventScaler('builders', [['x', 'b']], { roles: ['builder'] }),
      eventScaler('every', [['x', 'e', 'f']]),
    );
    expect(route(t, ['x'])).toBe('exec-only#0');
    expect(route(t, ['x'], { role: 'execution' })).toBe('exec-only#0');
    expect(route(t, ['x'], { role: 'build' })).toBe('builders#0');
    expect(route(t, ['x'], { role: 'init' })).toBe('every#0');
    expect(route(t, ['b'], { role: 'init' })).toBeUndefined();
  });

  it('gives a job without labels the first set whose gate is empty, however large', () => {
    const t = tableOf(
      eventScaler('tainted', [['w']], { platform: { os: 'windows', arch: 'x64' } }),
      eventScaler('gated', [['g']], { mandatoryLabels: ['g'] }),
      eventScaler('big', [['a', 'b', 'c']]),
      eventScaler('small', [['a']]),
    );
    expect(route(t, [])).toBe('big#0');
    expect(route(t, [], { exclude: ['c'] })).toBe('small#0');
  });

  it('finds nothing for a job without labels when every set is gated', () => {
    const t = tableOf(eventScaler('gated', [['g']], { mandatoryLabels: ['g'] }));
    expect(route(t, [])).toBeUndefined();
    expect(route([], ['x'])).toBeUndefined();
  });
});

describe('role and agent labels', () => {
  it.each([
    { roles: undefined, want: ['kici:role:execution', 'kici:role:builder', 'kici:role:init-runner'] },
    // An explicit empty list: the agents take no role, so they carry no role label.
    { roles: [] as ScalerEntry['roles'], want: [] },
    { roles: ['builder'] as ScalerEntry['roles'], want: ['kici:role:execution', 'kici:role:builder'] },
    {
      roles: ['init-runner'] as ScalerEntry['roles'],
      want: ['kici:role:execution', 'kici:role:init-runner'],
    },
  ])('roleLabelsFor($roles)', ({ roles, want }) => {
    expect(roleLabelsFor(roles)).toEqual(want);
  });

  it('maps job roles to the label they need', () => {
    expect(roleRequirement('build')).toBe('kici:role:builder');
    expect(roleRequirement('init')).toBe('kici:role:init-runner');
    expect(roleRequirement('execution')).toBeUndefined();
    expect(roleRequirement(undefined)).toBeUndefined();
  });

  it('gives an agent its declared labels, taints, type, scaler and roles, canonical', () => {
    const [entry] = parseConfig(
      eventScaler('Mac-Pool', [['Build', 'secure']], {
        platform: { os: 'macos', arch: 'arm64' },
        mandatoryLabels: ['secure'],
        roles: ['builder'],
      }),
    ).scalers;
    const labels = agentLabelsFor(entry!, entry!.labelSets[0]!.labels);
    expect(labels).toEqual(
      canonicalizeLabels([
        'build',
        'secure',
        'kici:agent:event',
        'kici:scaler:mac-pool',
        'kici:role:execution',
        'kici:role:builder',
        'macos',
        'arm64',
      ]),
    );
  });

  it('agrees with the routing table on every label a job could ask for', () => {
    const config = parseConfig(
      eventScaler('Pool-A', [['x', 'y']], {
        platform: { os: 'windows', arch: 'arm64' },
        roles: ['init-runner'],
      }),
    );
    const [ls] = buildRoutingTable(config, { host: LINUX_X64 });
    const agent = agentLabelsFor(config.scalers[0]!, ls!.declared);
    // The agent self-reports os/arch; everything else it carries must be routable and vice versa.
    const routable = [...ls!.labels].filter((l) => !/^kici:(os|arch):/.test(l));
    expect(canonicalizeLabels(routable)).toEqual(agent);
  });
});

describe('loading from YAML', () => {
  it('routes a config read by the real loader', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kici-routing-'));
    try {
      const file = join(dir, 'scalers.yaml');
      await writeFile(
        file,
        [
          'version: 1',
          'scalers:',
          '  - name: macs',
          '    type: event',
          '    maxAgents: 2',
          '    provisioningTargets: ["job:p.yaml"]',
          '    platform: { os: macos, arch: arm64 }',
          '    labelSets:',
          '      - labels: [Xcode, ios]',
          '  - name: linux',
          '    type: event',
          '    maxAgents: 2',
          '    provisioningTargets: ["job:p.yaml"]',
          '    labelSets:',
          '      - labels: [xcode, ios, emulator]',
          '',
        ].join('\n'),
      );
      const table = buildRoutingTable(await loadScalerConfig(file), { host: LINUX_X64 });
      expect(route(table, ['IOS'])).toBe('linux#0');
      expect(route(table, ['ios', 'MacOS', 'arm64'])).toBe('macs#0');
      expect(route(table, ['ios', 'macos'])).toBeUndefined();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('findLabelSet properties', () => {
  const WORDS = ['linux', 'docker', 'gpu', 'big', 'ssd', 'secure'];
  const PLATFORMS = [
    undefined,
    { os: 'linux', arch: 'x64' },
    { os: 'linux', arch: 'arm64' },
    { os: 'macos', arch: 'arm64' },
    { os: 'windows', arch: 'x64' },
  ] as const;
  const ROLES = [undefined, [], ['builder'], ['init-runner'], ['all'], ['builder', 'init-runner']];
  /** Taints written out by hand, independent of the code under test. */
  const TAINTS: Record<string, string[]> = {
    'linux/x64': [],
    'linux/arm64': ['arm64'],
    'macos/arm64': ['macos', 'arm64'],
    'windows/x64': ['windows'],
  };
  const taintsOf = (p: { os: string; arch: string } | undefined) => (p ? TAINTS[`${p.os}/${p.arch}`]! : []);

  const spelled = (w: string) =>
    fc.constantFrom(w, w.toUpperCase(), w[0]!.toUpperCase() + w.slice(1), ` ${w} `);
  const wordArb = fc.constantFrom(...WORDS).chain(spelled);

  const scalerArb = fc.record({
    sets: fc.array(fc.array(wordArb, { minLength: 1, maxLength: 4 }), { minLength: 1, maxLength: 3 }),
    mandatory: fc.array(fc.constantFrom('gpu', 'secure'), { maxLength: 2 }),
    platform: fc.constantFrom(...PLATFORMS),
    roles: fc.constantFrom(...ROLES),
    upperName: fc.boolean(),
  });

  const configArb = fc.array(scalerArb, { minLength: 1, maxLength: 5 }).map((scalers) =>
    scalers.map((s, i) => {
      const extra: Entry = { mandatoryLabels: s.mandatory };
      if (s.platform) extra.platform = { ...s.platform };
      if (s.roles) extra.roles = s.roles;
      // Every gate label must be reachable from every set (config rule), so add the mandatory ones.
      return eventScaler(
        s.upperName ? `S${i}` : `s${i}`,
        s.sets.map((set) => [...set, ...s.mandatory]),
        extra,
      );
    }),
  );

  const QUERY_WORDS = [
    ...WORDS,
    'macos',
    'windows',
    'arm64',
    'kici:agent:event',
    'kici:scaler:s0',
    'kici:scaler:s1',
    'kici:os:linux',
    'kici:role:builder',
  ];
  const queryArb = fc.record({
    words: fc.array(fc.constantFrom(...QUERY_WORDS).chain(spelled), { maxLength: 4 }),
    role: fc.constantFrom<JobRole | undefined>(undefined, 'execution', 'build', 'init'),
    exclude: fc.subarray(['big', 'docker', 'kici:scaler:s1', 'macos']),
  });

  function serves(ls: RoutableLabelSet, q: RouteQuery): boolean {
    const job = new Set(q.labels);
    const need = roleRequirement(q.role);
    return (
      ls.gate.every((g) => job.has(g)) &&
      q.labels.every((l) => ls.labels.has(l)) &&
      (need === undefined || ls.labels.has(need)) &&
      !(q.exclude ?? []).some((x) => ls.labels.has(x))
    );
  }

  it('builds each set with the configured labels and a gate of mandatoryLabels ∪ platform taints', () => {
    fc.assert(
      fc.property(configArb, (scalers) => {
        const config = parseConfig(...scalers);
        const table = buildRoutingTable(config, { host: LINUX_X64 });
        expect(table).toHaveLength(scalers.reduce((n, s) => n + (s.labelSets as unknown[]).length, 0));
        for (const ls of table) {
          const raw = scalers.find((s) => s.name === ls.scalerName)!;
          const rawSet = (raw.labelSets as { labels: string[] }[])[ls.index]!.labels;
          const platform = raw.platform as { os: string; arch: string } | undefined;
          const gate = [
            ...new Set(
              [...(raw.mandatoryLabels as string[]), ...taintsOf(platform)].map((l) =>
                l.trim().toLowerCase(),
              ),
            ),
          ];
          expect(ls.declared).toEqual(rawSet.map((l) => l.trim().toLowerCase()));
          expect(ls.gate).toEqual(gate);
          for (const l of [
            ...ls.declared,
            ...gate,
            `kici:scaler:${ls.scalerName.toLowerCase()}`,
            'kici:agent:event',
          ]) {
            expect(ls.labels.has(l)).toBe(true);
          }
        }
      }),
      { numRuns: 150 },
    );
  });

  it('picks a set that serves the job and that no strictly smaller serving set beats', () => {
    fc.assert(
      fc.property(configArb, queryArb, (scalers, q) => {
        const table = buildRoutingTable(parseConfig(...scalers), { host: LINUX_X64 });
        const query: RouteQuery = { labels: canonicalizeLabels(q.words), role: q.role, exclude: q.exclude };
        const hit = findLabelSet(query, table);
        const serving = table.filter((ls) => serves(ls, query));
        if (!hit) {
          expect(serving).toEqual([]);
          return;
        }
        expect(serves(hit, query)).toBe(true);
        expect(hit.gate.every((g) => query.labels.includes(g))).toBe(true);
        if (query.labels.length === 0) {
          // No labels: the first set with an empty gate that the role and exclusions allow.
          expect(hit.gate).toEqual([]);
          expect(hit).toBe(serving[0]);
          return;
        }
        for (const other of serving)
          expect(other.declared.length).toBeGreaterThanOrEqual(hit.declared.length);
        // First on a tie: nothing earlier in the table serves with the same size.
        const earlier = table.slice(0, table.indexOf(hit));
        expect(
          earlier.filter((ls) => serves(ls, query) && ls.declared.length === hit.declared.length),
        ).toEqual([]);
      }),
      { numRuns: 400 },
    );
  });

  it('does not depend on the order, case or repetition of the job labels', () => {
    fc.assert(
      fc.property(
        configArb,
        queryArb,
        fc.array(fc.nat(), { minLength: 8, maxLength: 8 }),
        (scalers, q, shuffleKeys) => {
          const table = buildRoutingTable(parseConfig(...scalers), { host: LINUX_X64 });
          const base = findLabelSet(
            { labels: canonicalizeLabels(q.words), role: q.role, exclude: q.exclude },
            table,
          );
          // Reorder, respell and repeat the same labels.
          const respelled = [...q.words, ...q.words.slice(0, 1)]
            .map((w, i) => ({ w: i % 2 === 0 ? w.toUpperCase() : ` ${w}`, k: shuffleKeys[i % 8]! + i / 100 }))
            .sort((a, b) => a.k - b.k)
            .map((x) => x.w);
          const variant = findLabelSet(
            { labels: canonicalizeLabels(respelled), role: q.role, exclude: q.exclude },
            table,
          );
          expect(variant).toBe(base);
          // Folded but unsorted and repeated input routes the same way too.
          const unsorted = respelled.map(foldLabel);
          expect(findLabelSet({ labels: unsorted, role: q.role, exclude: q.exclude }, table)).toBe(base);
        },
      ),
      { numRuns: 300 },
    );
  });
});
