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

/** A beat waits at most this share of the interval for its part; a slower part goes with a later beat. */
const PART_WAIT_SHARE = 0.25;

type BuiltPart = { json: string; fingerprint: string } | undefined;

/**
 * Heartbeats this orchestrator's row into `kici_instances` every `intervalMs`. A failed beat is
 * logged once per outage and retried on the next tick: presence is advisory, never fatal.
 *
 * The part is built beside the beat, not in its way: a beat waits for it only a quarter of the
 * interval, and a part that takes longer (a slow disk under the tool checks, say) is written by the
 * first beat after it is ready. A part that never finishes thus costs the view, never the heartbeat
 * that tells the peers this instance is alive.
 */
export class InstancePresence {
  private timer: TimerHandle | undefined;
  private failing = false;
  private running: Promise<void> | undefined;
  /** The fingerprint of the part as last stored, and the beats since: an unchanged part is not written again. */
  private stored: { fingerprint: string; beatsAgo: number } | undefined;
  /** The part being built (one at a time), and one that was ready too late for its own beat. */
  private building: Promise<BuiltPart> | undefined;
  private late: BuiltPart;
  private slowPartLogged = false;
  /** A beat asked for while one was in flight, to go out after it (it may have read old facts). */
  private next: Promise<void> | undefined;

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

  /**
   * The part for this beat: the one built now if it is ready within the wait, else one finished
   * since the last beat. A build still running from an earlier beat is waited on, not doubled.
   */
  private async partForBeat(): Promise<BuiltPart> {
    const build = (this.building ??= this.partOf().finally(() => (this.building = undefined)));
    let timer: TimerHandle | undefined;
    const waited = new Promise<'late'>((resolve) => {
      timer = this.clock.setTimer(Math.floor(this.intervalMs * PART_WAIT_SHARE), () => resolve('late'));
    });
    const got = await Promise.race([build, waited]);
    timer?.cancel();
    if (got !== 'late') {
      this.late = undefined;
      return got;
    }
    if (!this.slowPartLogged)
      this.log.warn(
        { waitedMs: Math.floor(this.intervalMs * PART_WAIT_SHARE) },
        "this instance's part of the cluster view is slow to build; heartbeats go on without waiting for it",
      );
    this.slowPartLogged = true;
    void build.then((p) => {
      if (p) this.late = p;
    });
    const late = this.late;
    this.late = undefined;
    return late;
  }

  /** Store one beat; the part counts as stored only once the write went through. */
  private async store(starting = false): Promise<void> {
    // Without a part to build, the beat goes out in the same turn as its timer, as it did before.
    const part = this.facts.part ? await this.partForBeat() : undefined;
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

  /**
   * A fact changed (leadership): beat now, or right after the beat in flight, which may have read
   * the facts before the change.
   */
  beatAfterChange(): Promise<void> {
    if (!this.running) return this.beat();
    const running = this.running;
    this.next ??= running.then(() => {
      this.next = undefined;
      return this.timer ? this.beat() : undefined;
    });
    return this.next;
  }

  async stop(): Promise<void> {
    this.timer?.cancel();
    this.timer = undefined;
    await this.next;
    await this.running;
    await this.repo
      .markStopped(this.instanceId)
      .catch((err: unknown) =>
        this.log.warn({ err: errorMessage(err) }, 'could not mark this instance stopped'),
      );
  }
}
