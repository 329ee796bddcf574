import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  canonicalizeLabels,
  hasReservedPrefix,
  isPlatformLabelWord,
  normalizeLabelSet,
  normalizeRoles,
  platformToTaints,
} from '../../../src/config/index.js';

describe('canonicalizeLabels', () => {
  it('trims and lowercases, keeping the declared order and duplicates', () => {
    expect(canonicalizeLabels([' Linux', 'docker', 'LINUX ', 'Docker', 'arm64'])).toEqual([
      'linux',
      'docker',
      'linux',
      'docker',
      'arm64',
    ]);
  });

  it('keeps an empty list empty', () => expect(canonicalizeLabels([])).toEqual([]));

  const label = fc.stringMatching(/^[ ]{0,2}[A-Za-z0-9:_-]{1,8}[ ]{0,2}$/);

  it('is idempotent', () => {
    fc.assert(
      fc.property(fc.array(label), (labels) => {
        const once = canonicalizeLabels(labels);
        expect(canonicalizeLabels(once)).toEqual(once);
      }),
    );
  });

  it('the matching key (normalizeLabelSet) does not depend on order or duplicates', () => {
    fc.assert(
      fc.property(
        fc
          .array(label)
          .chain((l) => fc.tuple(fc.constant(l), fc.shuffledSubarray(l, { minLength: l.length }))),
        ([a, b]) => {
          expect(normalizeLabelSet([...b, ...b])).toEqual(normalizeLabelSet(a));
        },
      ),
    );
  });

  it('is insensitive to case and surrounding whitespace', () => {
    fc.assert(
      fc.property(fc.array(label), (labels) => {
        const shouted = labels.map((l) => ` ${l.toUpperCase()} `);
        expect(canonicalizeLabels(shouted)).toEqual(canonicalizeLabels(labels));
      }),
    );
  });

  it('yields one folded label per input label, in the input order', () => {
    fc.assert(
      fc.property(fc.array(label), (labels) => {
        const out = canonicalizeLabels(labels);
        expect(out.length).toBe(labels.length);
        out.forEach((l, i) => expect(l).toBe(labels[i]!.trim().toLowerCase()));
      }),
    );
  });
});

describe('normalizeLabelSet', () => {
  it.each([
    [[], ''],
    [['Docker', 'linux', 'linux'], 'docker,linux'],
    [['b', 'a', ' C '], 'a,b,c'],
  ])('%j -> %j', (labels, key) => expect(normalizeLabelSet(labels)).toBe(key));
});

describe('reserved prefix', () => {
  it.each([
    ['kici:os:linux', true],
    ['KICI:scaler:x', true],
    ['  Kici:x', true],
    ['kici', false],
    ['kicix:y', false],
    ['linux', false],
  ])('%j reserved=%s', (label, reserved) => expect(hasReservedPrefix(label)).toBe(reserved));
});

describe('platform words', () => {
  it.each(['windows', 'WIN32', 'macos', 'Darwin', 'arm64', 'aarch64', 'arm'])('%s names a platform', (w) =>
    expect(isPlatformLabelWord(w)).toBe(true),
  );
  it.each(['linux', 'x64', 'armv7', 'gpu'])('%s does not', (w) => expect(isPlatformLabelWord(w)).toBe(false));
});

describe('platformToTaints', () => {
  it.each([
    [undefined, []],
    [{ os: 'linux', arch: 'x64' }, []],
    [{ os: 'macos', arch: 'x64' }, ['macos']],
    [{ os: 'windows', arch: 'x64' }, ['windows']],
    [{ os: 'linux', arch: 'arm64' }, ['arm64']],
    [{ os: 'macos', arch: 'arm64' }, ['macos', 'arm64']],
    [{ os: 'windows', arch: 'arm64' }, ['windows', 'arm64']],
  ] as const)('%j -> %j', (platform, taints) => expect(platformToTaints(platform)).toEqual(taints));
});

describe('normalizeRoles', () => {
  it.each([
    [undefined, undefined],
    [['all'], undefined],
    [['builder', 'all'], undefined],
    [[], []],
    [['builder'], ['builder']],
    [
      ['init-runner', 'builder'],
      ['init-runner', 'builder'],
    ],
  ] as const)('%j -> %j', (roles, out) => expect(normalizeRoles(roles)).toEqual(out));
});
