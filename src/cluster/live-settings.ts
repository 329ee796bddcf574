import {
  applyOverrides,
  CLUSTER_SETTING_KEYS,
  judgeChanges,
  specOf,
  type ClusterOverrides,
  type ClusterSettingKey,
} from '../config/cluster-settings.js';
import type { ScalerSettings } from '../config/scaler-settings.js';
import type { LiveReapTuning } from '../scaler/event-reaper.js';
import type { ClusterSettingsRepo } from '../store/cluster-settings-repo.js';
import { every, type Clock, type TimerHandle } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

/** One row of `cluster-settings show`. */
export interface ClusterSettingView {
  key: ClusterSettingKey;
  /** The cluster-wide value, or null when this instance uses its own. */
  value: number | null;
  /** This instance's own value (flag, else variable, else default). */
  instanceValue: number;
  /** What this instance uses now. */
  effective: number;
  min: number;
  env: string;
  flag: string;
}

export type SetResult = { ok: true; settings: ClusterSettingView[] } | { ok: false; problems: string[] };

/**
 * This instance's view of the cluster settings: its own settings with the stored values over them.
 * Readers call `get()` on each use, so a value stored by any instance is in force here after the
 * next refresh (one every heartbeat interval, and at once after a change made through this one).
 * A refresh that fails keeps the last values: the settings are never dropped because the database
 * blinked.
 */
export class LiveScalerSettings {
  private overrides: ClusterOverrides = {};
  private current: ScalerSettings;
  private timer: TimerHandle | undefined;
  private failing = false;

  constructor(
    private readonly base: ScalerSettings,
    private readonly repo: ClusterSettingsRepo,
    private readonly log: Logger,
  ) {
    this.current = base;
  }

  get<K extends keyof ScalerSettings>(key: K): ScalerSettings[K] {
    return this.current[key];
  }

  /** Was this serve setting given a cluster-wide value? (callers keep their own tuning otherwise) */
  overridden(key: keyof ScalerSettings): boolean {
    return CLUSTER_SETTING_KEYS.some((k) => specOf(k).key === key && this.overrides[k] !== undefined);
  }

  async refresh(): Promise<void> {
    try {
      const read = await this.repo.read();
      const changed = JSON.stringify(read) !== JSON.stringify(this.overrides);
      this.overrides = read;
      this.current = applyOverrides(this.base, this.overrides);
      if (changed) this.log.info({ clusterSettings: read }, 'cluster settings in force');
      if (this.failing) this.log.info('cluster settings read again');
      this.failing = false;
    } catch (err) {
      if (!this.failing)
        this.log.warn(
          { err: errorMessage(err) },
          'could not read the cluster settings; keeping the last ones',
        );
      this.failing = true;
    }
  }

  /** First read now, then one every `intervalMs`. */
  async start(clock: Clock, intervalMs: number): Promise<void> {
    await this.refresh();
    this.timer = every(clock, intervalMs, () => void this.refresh());
  }

  stop(): void {
    this.timer?.cancel();
    this.timer = undefined;
  }

  view(): ClusterSettingView[] {
    return CLUSTER_SETTING_KEYS.map((key) => {
      const spec = specOf(key);
      return {
        key,
        value: this.overrides[key] ?? null,
        instanceValue: this.base[spec.key],
        effective: this.current[spec.key],
        min: spec.min,
        env: spec.env,
        flag: `--${spec.flag}`,
      };
    });
  }

  /** The event reaper's tuning, read on each use. */
  reapTuning(): LiveReapTuning {
    return {
      windows: () => ({
        strandedTimeoutMs: this.get('scalerReapStrandedTimeoutMs'),
        reattemptIntervalMs: this.get('scalerReapReattemptIntervalMs'),
        // A cluster-wide grace still waits out twice a peer's stale timeout, as the serve setting does.
        flapGraceMs: this.overridden('rerouteFlapGraceMs')
          ? Math.max(this.get('rerouteFlapGraceMs'), 2 * this.get('clusterPeerStaleTimeoutMs'))
          : this.get('rerouteFlapGraceMs'),
      }),
      claimRetentionMs: () => this.get('scalerClaimRetentionMs'),
      intervalMs: () => this.get('scalerReapIntervalMs'),
    };
  }

  /** Judge and store a change (the API's body), then read back what is in force. */
  async set(body: unknown, by: string | null, at: Date): Promise<SetResult> {
    // Judged against the stored values, not this instance's possibly stale copy.
    const stored = await this.repo.read();
    const judged = judgeChanges(body, stored, this.base);
    if (!judged.ok) return judged;
    await this.repo.write(judged.changes, by, at);
    await this.refresh();
    this.log.info({ changes: judged.changes, by }, 'cluster settings changed');
    return { ok: true, settings: this.view() };
  }
}
