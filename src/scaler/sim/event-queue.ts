/**
 * The simulator's virtual clock: a binary min-heap of events ordered by time, then by insertion
 * order, so events at the same instant run in the order they were scheduled (deterministic replay).
 */
export class EventQueue<E> {
  private readonly times: number[] = [];
  private readonly seqs: number[] = [];
  private readonly items: E[] = [];
  private seq = 0;

  get size(): number {
    return this.items.length;
  }

  /** Time of the earliest event (Infinity when empty). */
  peekTime(): number {
    return this.items.length ? this.times[0]! : Infinity;
  }

  /** The earliest event without removing it. */
  peek(): E | undefined {
    return this.items[0];
  }

  push(at: number, item: E): void {
    let i = this.items.length;
    this.times.push(at);
    this.seqs.push(this.seq++);
    this.items.push(item);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.less(i, p)) break;
      this.swap(i, p);
      i = p;
    }
  }

  /** Removes and returns the earliest event with its time. */
  pop(): { at: number; item: E } | undefined {
    const n = this.items.length;
    if (n === 0) return undefined;
    const at = this.times[0]!;
    const item = this.items[0]!;
    const lastT = this.times.pop()!;
    const lastS = this.seqs.pop()!;
    const lastI = this.items.pop()!;
    if (n > 1) {
      this.times[0] = lastT;
      this.seqs[0] = lastS;
      this.items[0] = lastI;
      this.siftDown(0);
    }
    return { at, item };
  }

  private siftDown(i: number): void {
    const n = this.items.length;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < n && this.less(l, m)) m = l;
      if (r < n && this.less(r, m)) m = r;
      if (m === i) return;
      this.swap(i, m);
      i = m;
    }
  }

  private less(a: number, b: number): boolean {
    const ta = this.times[a]!;
    const tb = this.times[b]!;
    return ta < tb || (ta === tb && this.seqs[a]! < this.seqs[b]!);
  }

  private swap(a: number, b: number): void {
    [this.times[a], this.times[b]] = [this.times[b]!, this.times[a]!];
    [this.seqs[a], this.seqs[b]] = [this.seqs[b]!, this.seqs[a]!];
    [this.items[a], this.items[b]] = [this.items[b]!, this.items[a]!];
  }
}
