/**
 * Every scaler setting of the serve command: its default, read from the environment, overridden by
 * its flag, and refused below its minimum with a message naming the flag, the variable and the fix.
 * The backoff settings are then proven on a manual clock through the manager.
 */
import { describe, expect, it } from 'vitest';
import { flagProperty, readScalerSettings, SCALER_SETTINGS } from '../../../src/config/scaler-settings.js';
import { DeterministicSpawnError } from '../../../src/scaler/core/spawn-errors.js';
import { withScalerSettings } from '../../../src/server/orchestrator-options.js';
import { UserError } from '../../../src/util/errors.js';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

describe('scaler settings', () => {
  it('covers the twelve timing and limit settings, each with its own variable and flag', () => {
    expect(SCALER_SETTINGS).toHaveLength(12);
    expect(new Set(SCALER_SETTINGS.map((s) => s.env)).size).toBe(12);
    expect(new Set(SCALER_SETTINGS.map((s) => s.flag)).size).toBe(12);
  });

  it.each(SCALER_SETTINGS.map((s) => [s.env, s] as const))('%s: default, env, flag, minimum', (_n, spec) => {
    expect(readScalerSettings({})[spec.key]).toBe(spec.defaultValue);
    const fromEnv = spec.defaultValue + 7_000;
    expect(readScalerSettings({ [spec.env]: String(fromEnv) })[spec.key]).toBe(fromEnv);
    const flag = { [flagProperty(spec.flag)]: String(spec.defaultValue + 9_000) };
    expect(readScalerSettings({ [spec.env]: String(fromEnv) }, flag)[spec.key]).toBe(
      spec.defaultValue + 9_000,
    );
    // The minimum itself is accepted (backoff max must also stay at or above the base).
    if (spec.key !== 'scalerProvisionBackoffMaxMs')
      expect(readScalerSettings({ [spec.env]: String(spec.min) })[spec.key]).toBe(spec.min);
    for (const bad of [String(spec.min - 1), '1.5', 'soon', ' '])
      if (bad.trim() !== '' || spec.min > 0) {
        const run = () => readScalerSettings({}, { [flagProperty(spec.flag)]: bad });
        expect(run).toThrow(UserError);
        expect(run).toThrow(`--${spec.flag}`);
        expect(run).toThrow(spec.env);
        expect(run).toThrow(`at least ${spec.min}`);
      }
    const envRun = () => readScalerSettings({ [spec.env]: String(spec.min - 1) });
    expect(envRun).toThrow(new RegExp(`^${spec.env}: expected whole`));
  });

  it('an empty variable means the default', () => {
    expect(readScalerSettings({ KICI_SCALER_SPAWN_TIMEOUT_MS: '' }).scalerSpawnTimeoutMs).toBe(300_000);
  });

  it('refuses a backoff maximum below the base, naming both', () => {
    expect(() =>
      readScalerSettings({
        KICI_SCALER_PROVISION_BACKOFF_BASE_MS: '60000',
        KICI_SCALER_PROVISION_BACKOFF_MAX_MS: '30000',
      }),
    ).toThrow(/backoff-max-ms.*below the backoff base \(60000\)/);
  });

  it('explicit orchestrator options win over the settings; the settings fill the rest', () => {
    const s = readScalerSettings({ KICI_SCALER_SPAWN_TIMEOUT_MS: '2000', KICI_AGENT_TOKEN_TTL_MS: '5000' });
    const o = withScalerSettings({ spawnTimeoutMs: 9000, scalerSettings: s });
    expect(o).toMatchObject({
      spawnTimeoutMs: 9000,
      agentTokenTtlMs: 5000,
      sweepIntervalMs: 10_000,
      reapIntervalMs: 60_000,
      provisionBackoff: { baseMs: 30_000, maxMs: 900_000, maxConsecutiveFailures: 5 },
    });
    expect(withScalerSettings({})).toEqual({});
  });

  it("the reaper's flap grace is the larger of the reroute grace and twice the peer stale timeout", () => {
    const defaults = withScalerSettings({ scalerSettings: readScalerSettings({}) });
    expect(defaults.reapWindows).toEqual({
      flapGraceMs: 120_000,
      strandedTimeoutMs: 1_800_000,
      reattemptIntervalMs: 600_000,
    });
    const stale = readScalerSettings({
      KICI_CLUSTER_PEER_STALE_TIMEOUT_MS: '90000',
      KICI_SCALER_REAP_REATTEMPT_INTERVAL_MS: '120000',
    });
    expect(withScalerSettings({ scalerSettings: stale }).reapWindows).toMatchObject({
      flapGraceMs: 180_000,
      reattemptIntervalMs: 120_000,
    });
    expect(
      withScalerSettings({ scalerSettings: stale, reapWindows: { flapGraceMs: 5 } }).reapWindows?.flapGraceMs,
    ).toBe(5);
  });
});

describe('backoff settings on a manual clock', () => {
  const hs = useManagerHarnesses();
  const config = { version: 1, scalers: [bareMetal('alpha', [['linux']])] };
  let seq = 0;

  it('base 2 s, max 5 s: deferrals of 2 s, 4 s, then 5 s, each ending exactly on time', async () => {
    const s = readScalerSettings({
      KICI_SCALER_PROVISION_BACKOFF_BASE_MS: '2000',
      KICI_SCALER_PROVISION_BACKOFF_MAX_MS: '5000',
    });
    const h = await hs.make({
      dispatcher: false,
      config,
      backoff: withScalerSettings({ scalerSettings: s }).provisionBackoff!,
    });
    const scale = async () => {
      const r = await h.manager.requestScale({ id: `job-${++seq}`, runId: 'run-1', runsOn: ['linux'] });
      await h.settle();
      return r;
    };
    for (const delay of [2000, 4000, 5000]) {
      const r = await scale();
      if (r.action !== 'spawning') throw new Error(`expected spawning, got ${JSON.stringify(r)}`);
      h.backend('alpha').failSpawn(
        r.agentId,
        new DeterministicSpawnError('binary-missing', 'no agent binary'),
      );
      await h.settle();
      expect(await scale()).toMatchObject({ action: 'skipped', retryAfterMs: delay });
      await h.advance(delay - 1);
      expect(await scale()).toMatchObject({ action: 'skipped', retryAfterMs: 1 });
      await h.advance(1);
    }
    expect((await scale()).action).toBe('spawning');
  });
});
