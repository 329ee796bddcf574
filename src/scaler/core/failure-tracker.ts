/**
 * Recent spawn failures for status output and diagnostics: a fixed-size ring, so a failure storm
 * costs bounded memory and old records fall out on their own. Pure: no clock.
 */

export interface FailureRecord {
  scalerName: string;
  /** Backend type (`container`, `bare-metal`, …) or `unknown` when it could not be resolved. */
  backendType: string;
  /** Whether the failed spawn was bound to a job (false for warm-pool spawns). */
  bound: boolean;
  kind: string;
  detail: string;
  atMs: number;
}

export interface ScalerFailureSummary {
  boundCount: number;
  unboundCount: number;
  lastError: { kind: string; detail: string };
  lastAtMs: number;
  backendType: string;
}

export const FAILURE_RING_SIZE = 256;

export class FailureTracker {
  private readonly ring: (FailureRecord | undefined)[];
  /** Index the next record is written to. */
  private next = 0;
  private count = 0;

  constructor(readonly capacity = FAILURE_RING_SIZE) {
    if (!(Number.isInteger(capacity) && capacity >= 1)) {
      throw new RangeError(`failure tracker capacity must be an integer >= 1, got ${capacity}`);
    }
    this.ring = new Array<FailureRecord | undefined>(capacity);
  }

  get size(): number {
    return this.count;
  }

  record(r: FailureRecord): void {
    this.ring[this.next] = { ...r };
    this.next = (this.next + 1) % this.capacity;
    this.count = Math.min(this.count + 1, this.capacity);
  }

  /** Records still held, oldest first. */
  records(): FailureRecord[] {
    const out: FailureRecord[] = [];
    const start = (this.next - this.count + this.capacity) % this.capacity;
    for (let i = 0; i < this.count; i++) {
      const r = this.ring[(start + i) % this.capacity];
      if (r) out.push({ ...r });
    }
    return out;
  }

  /**
   * Group records newer than `nowMs − windowMs` by scaler. The latest record (by time; on a tie,
   * the one recorded last) supplies the last error, time and backend type.
   */
  recentByScaler(windowMs: number, nowMs: number): Map<string, ScalerFailureSummary> {
    const since = nowMs - windowMs;
    const out = new Map<string, ScalerFailureSummary>();
    for (const r of this.records()) {
      if (r.atMs <= since) continue;
      let s = out.get(r.scalerName);
      if (!s) {
        s = {
          boundCount: 0,
          unboundCount: 0,
          lastError: { kind: r.kind, detail: r.detail },
          lastAtMs: r.atMs,
          backendType: r.backendType,
        };
        out.set(r.scalerName, s);
      } else if (r.atMs >= s.lastAtMs) {
        s.lastError = { kind: r.kind, detail: r.detail };
        s.lastAtMs = r.atMs;
        s.backendType = r.backendType;
      }
      if (r.bound) s.boundCount += 1;
      else s.unboundCount += 1;
    }
    return out;
  }
}
