import type { Logger } from '../util/logger.js';
import { every, systemClock, type Clock, type TimerHandle } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import { PART_REFRESH_BEATS, partFingerprint } from './cluster-view.js';
import type { InstanceBeat, InstancesRepo } from './instances-repo.js';

/** The live facts a heartbeat carries, read fresh on every beat. */
export interface PresenceFacts {
  address: () => string;
  agentsConnected: () => number;
  jobsRunning: () => number;
  isLeader: () => boolean;
  scaleLabelSets?: () => string[][];
  /** This instance's part of the cluster view (scaler status, diagnose, agents), published with the beat. */
  part?: () => Promise<unknown>;
}

/**
 * Heartbeats this orchestrator's row into `kici_instances` every `intervalMs`. A failed beat is
 * logged once per outage and retried on the next tick: presence is advisory, never fatal.
 */
export class InstancePresence {
  private timer: TimerHandle | undefined;
  private failing = false;
  private running: Promise<void> | undefined;
  /** The fingerprint of the part as last stored, and the beats since: an unchanged part is not written again. */
  private stored: { fingerprint: string; beatsAgo: number } | undefined;

  constructor(
    private readonly repo: InstancesRepo,
    readonly instanceId: string,
    private readonly version: string,
    readonly intervalMs: number,
    private readonly facts: PresenceFacts,
    private readonly log: Logger,
    private readonly clock: Clock = systemClock,
  ) {}

  /**
   * The part to write with this beat: when it says something new, or when only its durations moved
   * and the stored one is a few beats old. A part that cannot be built is skipped.
   */
  private async partOf(): Promise<{ json: string; fingerprint: string } | undefined> {
    if (!this.facts.part) return undefined;
    try {
      const part = await this.facts.part();
      const fingerprint = partFingerprint(part);
      if (this.stored) this.stored.beatsAgo++;
      if (this.stored?.fingerprint === fingerprint && this.stored.beatsAgo < PART_REFRESH_BEATS)
        return undefined;
      return { json: JSON.stringify(part), fingerprint };
    } catch (err) {
      this.log.warn({ err: errorMessage(err) }, "could not build this instance's part of the cluster view");
      return undefined;
    }
  }

  private beatOf(part: { json: string; fingerprint: string } | undefined): {
    beat: InstanceBeat;
    fingerprint?: string;
  } {
    const beat: InstanceBeat = {
      id: this.instanceId,
      address: this.facts.address(),
      version: this.version,
      heartbeatMs: this.intervalMs,
      agentsConnected: this.facts.agentsConnected(),
      jobsRunning: this.facts.jobsRunning(),
      leader: this.facts.isLeader(),
      scaleLabelSets: this.facts.scaleLabelSets?.() ?? [],
      ...(part ? { part: part.json } : {}),
    };
    return part ? { beat, fingerprint: part.fingerprint } : { beat };
  }

  /** Store one beat; the part counts as stored only once the write went through. */
  private async store(starting = false): Promise<void> {
    // Without a part to build, the beat goes out in the same turn as its timer, as it did before.
    const part = this.facts.part ? await this.partOf() : undefined;
    const { beat, fingerprint } = this.beatOf(part);
    await this.repo.beat(beat, starting);
    if (fingerprint !== undefined) this.stored = { fingerprint, beatsAgo: 0 };
  }

  /** First beat (a new life for the row), then one every interval. */
  async start(): Promise<void> {
    await this.store(true);
    this.timer = every(this.clock, this.intervalMs, () => void this.beat());
  }

  /** One beat now (also used when leadership changes, so status shows it at once). */
  beat(): Promise<void> {
    this.running ??= this.store()
      .then(
        () => {
          if (this.failing) this.log.info('instance heartbeat stored again');
          this.failing = false;
        },
        (err: unknown) => {
          if (!this.failing)
            this.log.warn({ err: errorMessage(err) }, 'could not store the instance heartbeat');
          this.failing = true;
        },
      )
      .finally(() => (this.running = undefined));
    return this.running;
  }

  async stop(): Promise<void> {
    this.timer?.cancel();
    this.timer = undefined;
    await this.running;
    await this.repo
      .markStopped(this.instanceId)
      .catch((err: unknown) =>
        this.log.warn({ err: errorMessage(err) }, 'could not mark this instance stopped'),
      );
  }
}
