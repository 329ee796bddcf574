/**
 * Lanes for chaos cells: cells of one lane run one after the other, the lanes side by side. A cell
 * mostly waits (on guests booting, on its gate, on a step's sleep), so several lanes take little
 * longer than the longest one alone, while each lane keeps its own cells from crowding the host.
 */
export class Lanes {
  private readonly tails = new Map<string, Promise<unknown>>();

  run<T>(lane: string, cell: () => Promise<T>): Promise<T> {
    const next = (this.tails.get(lane) ?? Promise.resolve()).catch(() => undefined).then(cell);
    this.tails.set(lane, next);
    return next;
  }
}

/**
 * Cells declared in turn from each lane: vitest starts only a few concurrent tests at once, in
 * declaration order, and a test waiting in its lane holds a place, so every lane must have one among
 * the first.
 */
export function interleave<C>(byLane: Record<string, C[]>): [string, C][] {
  const order: [string, C][] = [];
  for (let i = 0; Object.values(byLane).some((l) => i < l.length); i++)
    for (const [lane, list] of Object.entries(byLane)) {
      const cell = list[i];
      if (cell) order.push([lane, cell]);
    }
  return order;
}

/** A cell's wait in its lane counts towards its test's timeout: room for every cell before it. */
export const LANE_TIMEOUT = 1_800_000;
