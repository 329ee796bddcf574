/**
 * The serve settings take effect: a bad flag is a usage error (the CLI exits 2) and a bad variable a
 * configuration error (exit 1), and the settings that shape timing are proven on a manual clock
 * through the real manager, the same way the orchestrator hands them over (settings, then the
 * orchestrator options, then the manager's options).
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import {
  flagProperty,
  orchestratorUrlFrom,
  readScalerSettings,
  SCALER_SETTINGS,
} from '../../../src/config/scaler-settings.js';
import { SpawnError } from '../../../src/scaler/core/spawn-errors.js';
import { EventProvisionReaper } from '../../../src/scaler/event-reaper.js';
import { ClaimsRepo } from '../../../src/store/claims-repo.js';
import { withScalerSettings } from '../../../src/server/orchestrator-options.js';
import { startPendingSweep } from '../../../src/server/pending-sweep.js';
import { managerTiming } from '../../../src/server/scaler-wiring.js';
import { ManualClock } from '../../../src/util/clock.js';
import { UsageError, UserError } from '../../../src/util/errors.js';
import { spawnToken } from '../../helpers/harness-agents.js';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

/** The orchestrator options the serve command would build from this environment. */
const optionsFrom = (env: Record<string, string>) =>
  withScalerSettings({ scalerSettings: readScalerSettings(env) });

describe('which error a bad value is', () => {
  it.each(SCALER_SETTINGS.map((s) => [s.env, s] as const))(
    '%s: a bad flag is a usage error, a bad variable is not',
    (_n, spec) => {
      const flag = () => readScalerSettings({}, { [flagProperty(spec.flag)]: String(spec.min - 1) });
      expect(flag).toThrow(UsageError);
      expect(flag).toThrow(new RegExp(`^--${spec.flag}: .*Set --${spec.flag} or ${spec.env} to ${spec.min}`));
      const env = () => readScalerSettings({ [spec.env]: 'soon' });
      expect(env).toThrow(UserError);
      expect(env).not.toThrow(UsageError);
    },
  );

  it('a backoff maximum below the base is a usage error when a flag set either side', () => {
    const env = { KICI_SCALER_PROVISION_BACKOFF_BASE_MS: '60000' };
    expect(() => readScalerSettings(env, { scalerProvisionBackoffMaxMs: '30000' })).toThrow(UsageError);
    const fromEnv = () => readScalerSettings({ ...env, KICI_SCALER_PROVISION_BACKOFF_MAX_MS: '30000' });
    expect(fromEnv).toThrow(UserError);
    expect(fromEnv).not.toThrow(UsageError);
  });
});

describe('the URL agents dial', () => {
  it('flag, else variable, else none; only ws:// and wss:// pass', () => {
    expect(orchestratorUrlFrom(undefined, undefined)).toBeUndefined();
    expect(orchestratorUrlFrom(undefined, '')).toBeUndefined();
    expect(orchestratorUrlFrom(undefined, 'ws://10.0.0.5:8080/ws')).toBe('ws://10.0.0.5:8080/ws');
    expect(orchestratorUrlFrom('wss://ci.example/ws', 'ws://10.0.0.5:8080/ws')).toBe('wss://ci.example/ws');
    const flag = () => orchestratorUrlFrom('http://ci.example', undefined);
    expect(flag).toThrow(UsageError);
    expect(flag).toThrow(
      /^--orchestrator-url: expected a ws:\/\/ or wss:\/\/ URL, got "http:\/\/ci.example"/,
    );
    const env = () => orchestratorUrlFrom(undefined, 'not a url');
    expect(env).toThrow(/^KICI_ORCHESTRATOR_URL: /);
    expect(env).not.toThrow(UsageError);
  });
});

describe('the pending sweep interval on a manual clock', () => {
  it('the re-drive runs every configured interval, and not before; cancel stops it', () => {
    const clock = new ManualClock();
    let runs = 0;
    const timer = startPendingSweep(
      { ...optionsFrom({ KICI_SCALER_PENDING_SWEEP_INTERVAL_MS: '3000' }), clock },
      () => runs++,
    );
    clock.advance(2_999);
    expect(runs).toBe(0);
    clock.advance(1);
    expect(runs).toBe(1);
    clock.advance(6_000);
    expect(runs).toBe(3);
    timer.cancel();
    clock.advance(30_000);
    expect(runs).toBe(3);
    expect(clock.pendingTimers()).toBe(0);
  });

  it('a pass that throws does not stop the next one', () => {
    const clock = new ManualClock();
    let runs = 0;
    const timer = startPendingSweep({ clock, sweepIntervalMs: 1_000 }, () => {
      runs++;
      throw new Error('boom');
    });
    expect(() => clock.advance(1_000)).toThrow('boom');
    expect(() => clock.advance(1_000)).toThrow('boom');
    expect(runs).toBe(2);
    timer.cancel();
  });
});

describe('timing settings on a manual clock', () => {
  const hs = useManagerHarnesses();
  const config = { version: 1, scalers: [bareMetal('alpha', [['linux']])] };
  let seq = 0;

  it('the spawn timeout aborts the spawn exactly at the configured milliseconds', async () => {
    const opts = optionsFrom({ KICI_SCALER_SPAWN_TIMEOUT_MS: '7000' });
    const h = await hs.make({ dispatcher: false, config, ...managerTiming(opts) });
    const r = await h.manager.requestScale({ id: `job-${++seq}`, runId: 'run-1', runsOn: ['linux'] });
    await h.settle();
    if (r.action !== 'spawning') throw new Error(`expected spawning, got ${JSON.stringify(r)}`);
    const req = h.backend('alpha').requestFor(r.agentId)!;
    await h.advance(6_999);
    expect(req.signal.aborted).toBe(false);
    await h.advance(1);
    expect(req.signal.aborted).toBe(true);
  });

  it("the token lifetime is the spawned agent's token's lifetime", async () => {
    const opts = optionsFrom({ KICI_AGENT_TOKEN_TTL_MS: '5000' });
    const h = await hs.make({ dispatcher: false, config, ...managerTiming(opts) });
    const start = h.clock.now();
    const r = await h.manager.requestScale({ id: `job-${++seq}`, runId: 'run-1', runsOn: ['linux'] });
    await h.settle();
    if (r.action !== 'spawning') throw new Error(`expected spawning, got ${JSON.stringify(r)}`);
    const token = spawnToken(h.backend('alpha').requestFor(r.agentId)!);
    expect((await h.store.tokens.check(token, new Date(start + 4_999))).ok).toBe(true);
    expect(await h.store.tokens.check(token, new Date(start + 5_000))).toMatchObject({
      ok: false,
      reason: 'token expired',
    });
  });

  it('the failure streak: transient failures defer only from the configured count on', async () => {
    const opts = optionsFrom({
      KICI_SCALER_PROVISION_MAX_CONSECUTIVE_FAILURES: '3',
      KICI_SCALER_PROVISION_BACKOFF_BASE_MS: '4000',
    });
    const h = await hs.make({ dispatcher: false, config, ...managerTiming(opts) });
    const scale = async () => {
      const r = await h.manager.requestScale({ id: `job-${++seq}`, runId: 'run-1', runsOn: ['linux'] });
      await h.settle();
      return r;
    };
    for (let failure = 1; failure <= 3; failure++) {
      const r = await scale();
      if (r.action !== 'spawning') throw new Error(`failure ${failure}: got ${JSON.stringify(r)}`);
      h.backend('alpha').failSpawn(r.agentId, new SpawnError('transient', 'engine hiccup'));
      await h.settle();
    }
    // Two transient failures in a row retried at once; the third reached the streak and deferred.
    expect(await scale()).toMatchObject({ action: 'skipped', retryAfterMs: 4_000 });
  });

  it('the claim retention: expired claim codes are kept exactly that long', async () => {
    const opts = optionsFrom({ KICI_SCALER_CLAIM_RETENTION_MS: '20000' });
    const h = await hs.make({ dispatcher: false, config });
    const expiresAt = h.clock.now() + 1_000;
    const claims = new ClaimsRepo(h.store.db);
    await claims.insert({
      hash: 'c'.repeat(64),
      prefix: 'cccccc',
      agentId: 'agent-claim',
      scalerName: 'alpha',
      labels: ['linux'],
      agentTokenTtlMs: 60_000,
      orchestratorUrl: 'ws://127.0.0.1:1/ws',
      expiresAt: new Date(expiresAt),
      now: new Date(h.clock.now()),
    });
    const reaper = new EventProvisionReaper({
      db: h.store.db,
      engine: 'pglite',
      manager: h.manager,
      instanceId: 'orch-test',
      clock: h.clock,
      logger: pino({ level: 'silent' }),
      spawnTimeoutMs: 10_000,
      intervalMs: 60_000,
      ...(opts.claimRetentionMs !== undefined ? { claimRetentionMs: opts.claimRetentionMs } : {}),
    });
    const left = async () => (await claims.listForAgent('agent-claim')).length;
    await h.advance(expiresAt + 20_000 - h.clock.now());
    await reaper.tick();
    expect(await left()).toBe(1);
    await h.advance(1);
    await reaper.tick();
    expect(await left()).toBe(0);
    await reaper.stop();
  });
});
