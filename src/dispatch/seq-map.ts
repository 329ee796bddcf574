/** What a SeqMap holds: anything with an id and a place in the queue (a queued job). */
export interface Placed {
  id: string;
  seq: number;
}

/**
 * One list's queued jobs in submission (seq) order. Appends go to the main map. A job older than
 * the last one added (put back in the queue after its agent went away, or a peer's job that
 * committed late) goes to a small sorted side map that iteration merges in, and the side map is
 * folded into the main one only once it is a sizeable part of it: putting one job back costs the
 * side map's size, not the list's (rebuilding a million-job list took 0.1 s a job).
 *
 * Maps are replaced, never reordered in place: an iterator that is still live keeps reading the
 * map it started on, as it would a snapshot (clearing and refilling one could loop it forever).
 */
export class SeqMap<T extends Placed = Placed> {
  private main = new Map<string, T>();
  private early = new Map<string, T>();
  #last: T | undefined;

  /** The highest-seq job appended: a job older than it is placed, not appended. */
  get last(): T | undefined {
    return this.#last;
  }

  get size(): number {
    return this.main.size + this.early.size;
  }

  get(id: string): T | undefined {
    return this.main.get(id) ?? this.early.get(id);
  }

  delete(id: string): boolean {
    return this.main.delete(id) || this.early.delete(id);
  }

  append(job: T): void {
    this.main.set(job.id, job);
    this.#last = job;
  }

  /** Put jobs older than `last` in their places. */
  place(jobs: readonly T[]): void {
    const early = [...this.early.values(), ...jobs].sort(bySeq);
    if (early.length > FOLD_AT && early.length * 16 > this.main.size) {
      this.main = new Map([...merged(early.values(), this.main.values())].map((j) => [j.id, j]));
      this.early = new Map();
    } else this.early = new Map(early.map((j) => [j.id, j]));
  }

  values(): IterableIterator<T> {
    return this.early.size ? merged(this.early.values(), this.main.values()) : this.main.values();
  }
}

/** Below this many placed jobs the side map is kept apart whatever the list's size. */
const FOLD_AT = 1024;
const bySeq = (a: Placed, b: Placed) => a.seq - b.seq;

/** Two seq-ordered sequences as one. */
function* merged<T extends Placed>(a: Iterator<T>, b: Iterator<T>): Generator<T, void, undefined> {
  let x = a.next();
  let y = b.next();
  while (!x.done || !y.done) {
    if (y.done || (!x.done && x.value.seq < y.value.seq)) {
      yield x.value;
      x = a.next();
    } else {
      yield y.value;
      y = b.next();
    }
  }
}
