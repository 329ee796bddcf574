import fc from 'fast-check';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { LiveScalerSettings } from '../../../src/cluster/live-settings.js';
import {
  applyOverrides,
  CLUSTER_SETTING_KEYS,
  clusterKeyOf,
  formatClusterValue,
  judgeChanges,
  parseClusterValue,
  specOf,
} from '../../../src/config/cluster-settings.js';
import { readScalerSettings } from '../../../src/config/scaler-settings.js';
import { changesFrom } from '../../../src/cli/admin/cluster-settings-commands.js';
import { ClusterSettingsRepo } from '../../../src/store/cluster-settings-repo.js';
import type { OpenedDatabase } from '../../../src/store/index.js';
import { UsageError } from '../../../src/util/errors.js';
import { memoryDatabase } from '../../helpers/data-dir.js';

const base = readScalerSettings({});
const silent = pino({ level: 'silent' });
const key = fc.constantFrom(...CLUSTER_SETTING_KEYS);

describe('cluster setting values', () => {
  it('every key stands for a serve setting and keeps its minimum', () => {
    for (const k of CLUSTER_SETTING_KEYS) {
      const spec = specOf(k);
      expect(parseClusterValue(k, String(spec.min))).toEqual({ ok: true, value: spec.min });
      const below = parseClusterValue(k, String(spec.min - 1));
      expect(below.ok).toBe(false);
      if (!below.ok)
        expect(below.problem).toMatch(new RegExp(`^${k}: expected whole .* at least ${spec.min}`));
    }
  });

  it('parse after format is the identity, for numbers and for "default"', () => {
    fc.assert(
      fc.property(key, fc.option(fc.nat({ max: 10 ** 12 }), { nil: null }), (k, raw) => {
        const value = raw === null ? null : raw + specOf(k).min;
        expect(parseClusterValue(k, formatClusterValue(value))).toEqual({ ok: true, value });
      }),
    );
  });

  it('refuses anything that is not a whole number, naming the key', () => {
    fc.assert(
      fc.property(
        key,
        fc.string().filter((s) => !/^\s*\d+\s*$/.test(s) && s.trim().toLowerCase() !== 'default'),
        (k, raw) => {
          const r = parseClusterValue(k, raw);
          expect(r.ok).toBe(false);
          if (!r.ok) expect(r.problem.startsWith(`${k}: `)).toBe(true);
        },
      ),
    );
  });

  it('takes the key in snake or flag form', () => {
    expect(clusterKeyOf('Scaler-Reap-Interval-Ms')).toBe('scaler_reap_interval_ms');
    expect(clusterKeyOf('scaler_spawn_timeout_ms')).toBeUndefined();
  });

  it('a stored value overrides the instance value; an absent one leaves it', () => {
    const s = applyOverrides(base, { scaler_reap_interval_ms: 9000 });
    expect(s.scalerReapIntervalMs).toBe(9000);
    expect(s.scalerClaimRetentionMs).toBe(base.scalerClaimRetentionMs);
  });
});

describe('judging a change (the API body)', () => {
  it('names each bad field', () => {
    const r = judgeChanges({ nope: 1, agent_token_ttl_ms: 5, reroute_flap_grace_ms: '9000' }, {}, base);
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.problems[0]).toMatch(/^nope: not a cluster setting/);
      expect(r.problems[1]).toMatch(/^agent_token_ttl_ms: expected whole milliseconds of at least 1000/);
      expect(r.problems[2]).toMatch(/^reroute_flap_grace_ms: expected/);
    }
    expect(judgeChanges([], {}, base).ok).toBe(false);
    expect(judgeChanges({}, {}, base).ok).toBe(false);
  });

  it('keeps the backoff maximum at or above the base, stored values included', () => {
    const r = judgeChanges(
      { scaler_provision_backoff_base_ms: 60_000 },
      { scaler_provision_backoff_max_ms: 40_000 },
      base,
    );
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.problems[0]).toMatch(/^scaler_provision_backoff_max_ms: 40000 would be below/);
    expect(
      judgeChanges({ scaler_provision_backoff_max_ms: null, agent_token_ttl_ms: 1000 }, {}, base),
    ).toEqual({
      ok: true,
      changes: { scaler_provision_backoff_max_ms: null, agent_token_ttl_ms: 1000 },
    });
  });
});

describe('the command line', () => {
  it('KEY VALUE and --flags together; no setting or a bad value is a usage error', () => {
    expect(changesFrom('agent-token-ttl-ms', '5000', { rerouteFlapGraceMs: 'default' })).toEqual({
      agent_token_ttl_ms: 5000,
      reroute_flap_grace_ms: null,
    });
    expect(() => changesFrom(undefined, undefined, {})).toThrow(UsageError);
    expect(() => changesFrom('agent_token_ttl_ms', undefined, {})).toThrow(UsageError);
    expect(() => changesFrom('agent_token_ttl_ms', '1e4', {})).toThrow(/agent_token_ttl_ms: expected whole/);
  });
});

describe('two instances on one database', () => {
  let db: OpenedDatabase | undefined;
  afterEach(async () => {
    await db?.close();
    db = undefined;
  });

  it('a value set through one is in force on the other after its next refresh', async () => {
    db = await memoryDatabase();
    const repo = new ClusterSettingsRepo(db.db);
    const a = new LiveScalerSettings(base, repo, silent);
    const b = new LiveScalerSettings({ ...base, agentTokenTtlMs: 90_000 }, repo, silent);
    await b.refresh();
    expect(b.get('agentTokenTtlMs')).toBe(90_000);
    const r = await a.set({ agent_token_ttl_ms: 120_000 }, 'ops', new Date());
    expect(r.ok).toBe(true);
    expect(a.get('agentTokenTtlMs')).toBe(120_000);
    expect(b.get('agentTokenTtlMs')).toBe(90_000);
    await b.refresh();
    expect(b.get('agentTokenTtlMs')).toBe(120_000);
    await a.set({ agent_token_ttl_ms: null }, 'ops', new Date());
    await b.refresh();
    expect(b.get('agentTokenTtlMs')).toBe(90_000);
  });

  it('a cluster flap grace still waits twice the peer stale timeout', async () => {
    db = await memoryDatabase();
    const live = new LiveScalerSettings(base, new ClusterSettingsRepo(db.db), silent);
    await live.set({ reroute_flap_grace_ms: 1000 }, null, new Date());
    expect(live.reapTuning().windows().flapGraceMs).toBe(2 * base.clusterPeerStaleTimeoutMs);
    await live.set({ reroute_flap_grace_ms: 500_000, scaler_reap_interval_ms: 7000 }, null, new Date());
    expect(live.reapTuning().windows().flapGraceMs).toBe(500_000);
    expect(live.reapTuning().intervalMs()).toBe(7000);
  });
});
