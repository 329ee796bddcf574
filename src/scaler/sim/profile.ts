/** A latency observed at a moment: a spawn that took `ms` from its decision at `atMs`, say. */
export interface TimedSample {
  atMs: number;
  ms: number;
}

/**
 * A latency that follows the host over time, from samples observed in the real run. A busy host
 * spawns slower for a while, then faster again; one mean for the whole trace puts that slowness
 * in the wrong part of the replay. The value at a moment is the mean of the `k` samples nearest
 * to it in time.
 */
export class LatencyProfile {
  private readonly at: Float64Array;
  private readonly ms: Float64Array;

  constructor(
    samples: readonly TimedSample[],
    private readonly k = 6,
  ) {
    const sorted = [...samples].sort((a, b) => a.atMs - b.atMs);
    this.at = Float64Array.from(sorted, (s) => s.atMs);
    this.ms = Float64Array.from(sorted, (s) => s.ms);
  }

  get size(): number {
    return this.at.length;
  }

  valueAt(t: number): number {
    const n = this.at.length;
    if (n === 0) return 0;
    let lo = 0;
    let hi = n;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.at[mid]! < t) lo = mid + 1;
      else hi = mid;
    }
    // Two pointers outwards from the insertion point, taking the nearer side each time.
    let left = lo - 1;
    let right = lo;
    let sum = 0;
    let taken = 0;
    while (taken < this.k && (left >= 0 || right < n)) {
      const takeLeft = right >= n || (left >= 0 && t - this.at[left]! <= this.at[right]! - t);
      sum += this.ms[takeLeft ? left-- : right++]!;
      taken++;
    }
    return Math.round(sum / taken);
  }
}
