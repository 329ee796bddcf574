/** Queue wait and agent count over time, in fixed buckets, for the report's chart. */
export interface TimelineView {
  startMs: number;
  bucketMs: number;
  /** Highest number of live agents in each bucket. */
  agents: number[];
  /** Mean and highest queue wait of the jobs that started in each bucket (0 when none). */
  waitMeanMs: number[];
  waitMaxMs: number[];
}

export class Timeline {
  readonly bucketMs: number;
  private readonly maxAgents: Int32Array;
  private readonly lastAgents: Int32Array;
  private readonly touched: Uint8Array;
  private readonly waitSum: Float64Array;
  private readonly waitN: Uint32Array;
  private readonly waitMax: Float64Array;

  constructor(
    readonly startMs: number,
    spanMs: number,
    readonly points: number,
  ) {
    this.bucketMs = Math.max(1, Math.ceil(spanMs / points));
    this.maxAgents = new Int32Array(points);
    this.lastAgents = new Int32Array(points);
    this.touched = new Uint8Array(points);
    this.waitSum = new Float64Array(points);
    this.waitN = new Uint32Array(points);
    this.waitMax = new Float64Array(points);
  }

  private bucket(t: number): number {
    const b = Math.floor((t - this.startMs) / this.bucketMs);
    return b < 0 ? 0 : b >= this.points ? this.points - 1 : b;
  }

  agents(t: number, n: number): void {
    const b = this.bucket(t);
    if (!this.touched[b] || n > this.maxAgents[b]!) this.maxAgents[b] = n;
    this.touched[b] = 1;
    this.lastAgents[b] = n;
  }

  wait(t: number, ms: number): void {
    const b = this.bucket(t);
    this.waitSum[b]! += ms;
    this.waitN[b]!++;
    if (ms > this.waitMax[b]!) this.waitMax[b] = ms;
  }

  view(): TimelineView {
    const agents: number[] = [];
    let carry = 0;
    for (let b = 0; b < this.points; b++) {
      agents.push(this.touched[b] ? Math.max(this.maxAgents[b]!, carry) : carry);
      if (this.touched[b]) carry = this.lastAgents[b]!;
    }
    const waitMeanMs = [...this.waitSum].map((s, b) => (this.waitN[b] ? Math.round(s / this.waitN[b]!) : 0));
    return {
      startMs: this.startMs,
      bucketMs: this.bucketMs,
      agents,
      waitMeanMs,
      waitMaxMs: [...this.waitMax],
    };
  }
}
