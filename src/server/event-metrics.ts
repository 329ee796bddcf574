import { Counter, Gauge, type Registry } from 'prom-client';
import type { ScaleEventObserver } from '../scaler/events/router.js';
import type { ScalerBackend } from '../scaler/types.js';

/** Event-scaler metrics, registered on the orchestrator's registry. */
export class EventMetrics implements ScaleEventObserver {
  private readonly scaleUp: Counter;
  private readonly scaleDown: Counter;
  private readonly timeouts: Counter;
  private readonly givenUp: Counter;
  private readonly unmatched: Counter;

  constructor(
    registry: Registry,
    backends: () => readonly ScalerBackend[],
    adoptionLookupFailures: () => number = () => 0,
  ) {
    const registers = [registry];
    new Counter({
      name: 'kici_orch_scaler_adoption_lookup_failures_total',
      help: 'Event agents refused because the store failed while looking up their spawn record',
      registers,
      // The manager counts; a scrape copies its figure, so the two cannot disagree.
      collect() {
        this.reset();
        this.inc(adoptionLookupFailures());
      },
    });
    this.scaleUp = new Counter({
      name: 'kici_orch_scaler_scale_up_emitted_total',
      help: 'Scale-up events an event scaler emitted',
      labelNames: ['scaler'],
      registers,
    });
    this.scaleDown = new Counter({
      name: 'kici_orch_scaler_scale_down_emitted_total',
      help: 'Scale-down events an event scaler emitted, by reason',
      labelNames: ['scaler', 'reason'],
      registers,
    });
    this.timeouts = new Counter({
      name: 'kici_orch_scaler_external_provision_timeout_total',
      help: 'Event provisions torn down because their agent never registered (spawn-timeout)',
      labelNames: ['scaler'],
      registers,
    });
    this.givenUp = new Counter({
      name: 'kici_orch_scaler_external_provisioning_delivery_given_up_total',
      help: 'Scale event deliveries given up after their retries ran out',
      labelNames: ['scaler'],
      registers,
    });
    this.unmatched = new Counter({
      name: 'kici_orch_event_unmatched_total',
      help: 'Scale events that reached no receiver, by event name and reason (no-targets, unknown-target)',
      labelNames: ['event_name', 'reason'],
      registers,
    });
    new Gauge({
      name: 'kici_orch_scaler_external_provisioning_active',
      help: 'Provisions an event scaler tracks (scale-up sent, no scale-down yet)',
      labelNames: ['scaler'],
      registers,
      // Read from the backends on each scrape, so it can never drift from their maps.
      collect() {
        this.reset();
        for (const b of backends()) if (b.type === 'event') this.set({ scaler: b.name }, b.getActiveCount());
      },
    });
  }

  scaleUpEmitted(scaler: string): void {
    this.scaleUp.inc({ scaler });
  }
  scaleDownEmitted(scaler: string, reason: string): void {
    this.scaleDown.inc({ scaler, reason });
  }
  provisionTimedOut(scaler: string): void {
    this.timeouts.inc({ scaler });
  }
  eventUnmatched(eventName: string, reason: string): void {
    this.unmatched.inc({ event_name: eventName, reason });
  }
  deliveryGivenUp(scaler: string): void {
    this.givenUp.inc({ scaler });
  }
}
