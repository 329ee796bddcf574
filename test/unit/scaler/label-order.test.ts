/**
 * A label set keeps its declared order and duplicates (each label trimmed and lowercased) into the
 * agent's labels, KICI_LABELS and the event payloads; matching a label set stays set-based.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  canonicalizeLabels,
  EventScalerBackend,
  labelSetConfigSchema,
  normalizeLabelSet,
} from '../../../src/index.js';
import { containerEnv } from '../../../src/scaler/backends/container/labels.js';
import { agentLabelsFor } from '../../../src/scaler/core/routing.js';
import { CountingEmitter, eventEntry, FakeClaims } from '../../helpers/event-backend.js';

describe('label order', () => {
  it('the label-set schema folds each label and keeps order and duplicates', () => {
    expect(labelSetConfigSchema.parse({ labels: [' Zeta', 'alpha', 'ZETA '] }).labels).toEqual([
      'zeta',
      'alpha',
      'zeta',
    ]);
  });

  it('property: canonical labels keep length and order; the matching key ignores both', () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom('a', 'B', ' c', 'b', 'A '), { minLength: 1 }), (labels) => {
        const canon = canonicalizeLabels(labels);
        expect(canon).toEqual(labels.map((l) => l.trim().toLowerCase()));
        const shuffled = [...labels].reverse().concat(labels[0]!);
        expect(normalizeLabelSet(shuffled)).toBe(normalizeLabelSet(labels));
      }),
    );
  });

  it('full labels: declared labels first in their order, then the scaler-added ones', () => {
    const entry = eventEntry({ name: 'pool', type: 'container' } as never);
    expect(agentLabelsFor(entry, ['zeta', 'alpha', 'zeta'])).toEqual([
      'zeta',
      'alpha',
      'zeta',
      'kici:agent:container',
      'kici:scaler:pool',
      'kici:role:execution',
      'kici:role:builder',
      'kici:role:init-runner',
    ]);
  });

  it('roles: [] adds no role label; roles [builder] adds execution and builder', () => {
    const none = agentLabelsFor(eventEntry({ roles: [] } as never), ['x']);
    expect(none.filter((l) => l.startsWith('kici:role:'))).toEqual([]);
    const some = agentLabelsFor(eventEntry({ roles: ['builder'] } as never), ['x']);
    expect(some.filter((l) => l.startsWith('kici:role:'))).toEqual([
      'kici:role:execution',
      'kici:role:builder',
    ]);
  });

  it('KICI_LABELS carries the full labels in that order', () => {
    const env = containerEnv({
      orchestratorUrl: 'http://o',
      agentId: 'a',
      fullLabels: ['zeta', 'alpha', 'zeta', 'kici:agent:container'],
      labelSet: { labels: ['zeta', 'alpha', 'zeta'] } as never,
      hostEnv: {},
      jobImage: false,
    });
    expect(env).toContain('KICI_LABELS=zeta,alpha,zeta,kici:agent:container');
  });

  it('an event scale-up carries the declared order, and a reordered spelling still finds the label set', async () => {
    const emitter = new CountingEmitter();
    const backend = new EventScalerBackend({
      entry: eventEntry({ labelSets: [{ labels: ['linux', 'cloud', 'linux'] }] } as never),
      emitter,
      claimStore: new FakeClaims(),
      requestId: () => 'r',
    });
    await backend.spawn(['Linux', 'cloud', 'linux'], 'scaler-event-o1', 'https://ci');
    await backend.spawn(['cloud', 'LINUX'], 'scaler-event-o2', 'https://ci');
    const [first, second] = emitter.ups();
    expect(first!.payload.labels.slice(0, 3)).toEqual(['linux', 'cloud', 'linux']);
    expect(second!.payload.labels.slice(0, 2)).toEqual(['cloud', 'linux']);
  });
});
