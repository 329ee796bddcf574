import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ResourceRequest } from '../../../src/config/index.js';
import {
  isZero,
  resolveResources,
  ZERO,
  type EffectiveResources,
} from '../../../src/scaler/core/resources.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const GiB = 1024 * MiB;

type Case = {
  name: string;
  job?: ResourceRequest;
  labelSet?: ResourceRequest;
  defaults?: ResourceRequest;
  want: EffectiveResources;
};

const both = (cpus: number, memBytes: number) => ({ cpus, memBytes });

const CASES: Case[] = [
  { name: 'nothing anywhere is zero on both sides', want: { requests: both(0, 0), limits: both(0, 0) } },
  {
    name: 'a job limit alone is also the request',
    job: { limits: { cpus: 2, memory: '4g' } },
    want: { requests: both(2, 4 * GiB), limits: both(2, 4 * GiB) },
  },
  {
    name: 'a job request alone is also the limit',
    job: { requests: { cpus: 0.5, memory: '512m' } },
    want: { requests: both(0.5, 512 * MiB), limits: both(0.5, 512 * MiB) },
  },
  {
    name: 'both job sides are kept apart',
    job: { requests: { cpus: 1, memory: '1g' }, limits: { cpus: 4, memory: '8g' } },
    want: { requests: both(1, GiB), limits: both(4, 8 * GiB) },
  },
  {
    name: 'the job wins over the label set and defaults, field by field',
    job: { limits: { cpus: 3 } },
    labelSet: { limits: { cpus: 1, memory: '2g' } },
    defaults: { limits: { cpus: 8, memory: '16g' } },
    want: { requests: both(3, 2 * GiB), limits: both(3, 2 * GiB) },
  },
  {
    name: 'the label set fills what the job leaves out before the defaults do',
    job: { requests: { memory: '1g' } },
    labelSet: { requests: { cpus: 2 } },
    defaults: { requests: { cpus: 9, memory: '9g' } },
    want: { requests: both(2, GiB), limits: both(2, GiB) },
  },
  {
    name: 'defaults fill the rest',
    labelSet: { limits: { memory: '256m' } },
    defaults: { requests: { cpus: 1.5 } },
    want: { requests: both(1.5, 256 * MiB), limits: both(1.5, 256 * MiB) },
  },
  {
    name: 'a side given alone is mirrored before the chain continues',
    // The label set's limit also stands for its request, so the default request never applies.
    labelSet: { limits: { cpus: 2 } },
    defaults: { requests: { cpus: 1, memory: '1g' } },
    want: { requests: both(2, GiB), limits: both(2, GiB) },
  },
  {
    name: 'with both sides given, a field missing on one side falls through rather than mirroring',
    job: { requests: { cpus: 1 }, limits: { memory: '2g' } },
    labelSet: { requests: { memory: '512m' }, limits: { cpus: 3 } },
    want: { requests: both(1, 512 * MiB), limits: both(3, 2 * GiB) },
  },
  {
    name: 'a field nobody gives stays zero on its own',
    job: { requests: { cpus: 1 } },
    want: { requests: both(1, 0), limits: both(1, 0) },
  },
  {
    name: 'memory is parsed in binary units, any case, fractions floored',
    job: { requests: { memory: '1.5G' }, limits: { memory: '1024k' } },
    want: { requests: both(0, 1610612736), limits: both(0, 1024 * KiB) },
  },
  {
    name: 'empty request objects count as given but carry nothing',
    job: { requests: {}, limits: {} },
    labelSet: { limits: { cpus: 2, memory: '2g' } },
    want: { requests: both(2, 2 * GiB), limits: both(2, 2 * GiB) },
  },
];

describe('resolveResources', () => {
  it.each(CASES)('$name', ({ job, labelSet, defaults, want }) => {
    expect(resolveResources(job, labelSet, defaults)).toEqual(want);
  });

  it('does not modify its inputs', () => {
    const job: ResourceRequest = { limits: { cpus: 1 } };
    const labelSet: ResourceRequest = { requests: { memory: '1g' } };
    const snapshot = JSON.stringify([job, labelSet]);
    resolveResources(job, labelSet, undefined);
    expect(JSON.stringify([job, labelSet])).toBe(snapshot);
  });

  it('refuses a memory string it cannot parse rather than billing nothing', () => {
    expect(() => resolveResources({ limits: { memory: '4Gi' } }, undefined, undefined)).toThrow(/memory/i);
  });

  it('isZero and ZERO', () => {
    expect(isZero(ZERO)).toBe(true);
    expect(isZero({ cpus: 0, memBytes: 1 })).toBe(false);
    expect(isZero({ cpus: 0.1, memBytes: 0 })).toBe(false);
    expect(Object.isFrozen(ZERO)).toBe(true);
  });
});

describe('resolveResources properties', () => {
  const specArb = fc.record(
    { cpus: fc.constantFrom(0.25, 1, 2, 3.5), memory: fc.constantFrom('256m', '1g', '1536k', '2G') },
    { requiredKeys: [] },
  );
  const requestArb = fc.option(fc.record({ requests: specArb, limits: specArb }, { requiredKeys: [] }), {
    nil: undefined,
  });
  const bytes: Record<string, number> = { '256m': 256 * MiB, '1g': GiB, '1536k': 1536 * KiB, '2G': 2 * GiB };

  /** The cascade written out from its rule, one field and side at a time. */
  function expected(
    chain: (ResourceRequest | undefined)[],
    side: 'requests' | 'limits',
    field: 'cpus' | 'memory',
  ) {
    for (const r of chain) {
      if (!r || (r.requests === undefined && r.limits === undefined)) continue;
      const own = r[side];
      const other = r[side === 'requests' ? 'limits' : 'requests'];
      // A side given alone stands for both; with both given, each side only speaks for itself.
      const value = (own ?? other)?.[field];
      if (value !== undefined) return value;
    }
    return undefined;
  }

  it('takes every field from the first link of the chain that gives it, else zero', () => {
    fc.assert(
      fc.property(requestArb, requestArb, requestArb, (job, labelSet, defaults) => {
        const out = resolveResources(job, labelSet, defaults);
        for (const side of ['requests', 'limits'] as const) {
          const cpus = expected([job, labelSet, defaults], side, 'cpus');
          const memory = expected([job, labelSet, defaults], side, 'memory');
          expect(out[side].cpus).toBe(cpus ?? 0);
          expect(out[side].memBytes).toBe(memory === undefined ? 0 : bytes[memory as string]);
        }
      }),
      { numRuns: 500 },
    );
  });

  it('bills the same request and limit whenever only one side is ever given', () => {
    const oneSided = fc.option(
      fc.oneof(
        specArb.map((s) => ({ requests: s })),
        specArb.map((s) => ({ limits: s })),
      ),
      { nil: undefined },
    );
    fc.assert(
      fc.property(oneSided, oneSided, oneSided, (job, labelSet, defaults) => {
        const out = resolveResources(job, labelSet, defaults);
        expect(out.requests).toEqual(out.limits);
      }),
    );
  });
});
