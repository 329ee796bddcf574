import type { Logger } from '../util/logger.js';
import { every, systemClock, type Clock, type TimerHandle } from '../util/clock.js';
import { errorMessage } from '../util/errors.js';
import type { InstanceBeat, InstancesRepo } from './instances-repo.js';

/** The live facts a heartbeat carries, read fresh on every beat. */
export interface PresenceFacts {
  address: () => string;
  agentsConnected: () => number;
  jobsRunning: () => number;
  isLeader: () => boolean;
  scaleLabelSets?: () => string[][];
}

/**
 * Heartbeats this orchestrator's row into `kici_instances` every `intervalMs`. A failed beat is
 * logged once per outage and retried on the next tick: presence is advisory, never fatal.
 */
export class InstancePresence {
  private timer: TimerHandle | undefined;
  private failing = false;
  private running: Promise<void> | undefined;

  constructor(
    private readonly repo: InstancesRepo,
    readonly instanceId: string,
    private readonly version: string,
    readonly intervalMs: number,
    private readonly facts: PresenceFacts,
    private readonly log: Logger,
    private readonly clock: Clock = systemClock,
  ) {}

  private beatOf(): InstanceBeat {
    return {
      id: this.instanceId,
      address: this.facts.address(),
      version: this.version,
      heartbeatMs: this.intervalMs,
      agentsConnected: this.facts.agentsConnected(),
      jobsRunning: this.facts.jobsRunning(),
      leader: this.facts.isLeader(),
      scaleLabelSets: this.facts.scaleLabelSets?.() ?? [],
    };
  }

  /** First beat (a new life for the row), then one every interval. */
  async start(): Promise<void> {
    await this.repo.beat(this.beatOf(), true);
    this.timer = every(this.clock, this.intervalMs, () => void this.beat());
  }

  /** One beat now (also used when leadership changes, so status shows it at once). */
  beat(): Promise<void> {
    this.running ??= this.repo
      .beat(this.beatOf())
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
