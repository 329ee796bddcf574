/**
 * The pid window a job's end reads /proc through: against a model of the kernel's pid counter
 * (increasing, wrapping to a floor, skipping pids in use), every process started after the mark
 * is inside the window whenever the window is given, however the counter moved.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { inPidWindow, pidWindow } from '../../../src/util/pid-window.js';

/** The kernel's allocator in small: the next free pid after the last one, wrapping from max to floor. */
class Counter {
  readonly inUse = new Set<number>();
  forks = 0;
  constructor(
    readonly pidMax: number,
    public last: number,
  ) {}
  fork(): number | undefined {
    for (let i = 0, p = this.last; i < this.pidMax; i++) {
      p = p + 1 >= this.pidMax ? 300 : p + 1;
      if (!this.inUse.has(p)) {
        this.inUse.add(p);
        this.last = p;
        this.forks++;
        return p;
      }
    }
    return undefined; // full
  }
}

describe('pid window', () => {
  it('holds every pid handed out after the mark, or gives no window', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 400, max: 1200 }),
        fc.integer({ min: 300, max: 1199 }),
        fc.array(fc.oneof(fc.constant('fork' as const), fc.nat()), { minLength: 0, maxLength: 400 }),
        fc.array(fc.oneof(fc.constant('fork' as const), fc.nat()), { minLength: 1, maxLength: 2000 }),
        (pidMax, start, before, after) => {
          const c = new Counter(pidMax, Math.min(start, pidMax - 1));
          const step = (op: 'fork' | number) => {
            if (op === 'fork') c.fork();
            else if (c.inUse.size) c.inUse.delete([...c.inUse][op % c.inUse.size]!);
          };
          before.forEach(step);
          const tasks = c.inUse.size;
          const forks = c.forks;
          const first = c.fork();
          if (first === undefined) return;
          const born = [first];
          for (const op of after) {
            if (op === 'fork') {
              const p = c.fork();
              if (p !== undefined) born.push(p);
            } else step(op);
          }
          const w = pidWindow({ pid: first, forks, tasks }, { lastPid: c.last, forks: c.forks, pidMax });
          if (!w) return;
          for (const p of born) expect(inPidWindow(p, w)).toBe(true);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('no window once the counter may have gone round, or when the counters went backwards', () => {
    expect(
      pidWindow({ pid: 500, forks: 10, tasks: 100 }, { lastPid: 499, forks: 10 + 2000, pidMax: 4400 }),
    ).toBe(undefined);
    expect(
      pidWindow({ pid: 500, forks: 10, tasks: 100 }, { lastPid: 600, forks: 9, pidMax: 4_194_304 }),
    ).toBe(undefined);
    expect(
      pidWindow({ pid: 500, forks: 10, tasks: 100 }, { lastPid: 600, forks: 20, pidMax: 4_194_304 }),
    ).toEqual({
      from: 500,
      to: 600,
    });
    expect(inPidWindow(4_000_000, { from: 3_999_000, to: 350 })).toBe(true);
    expect(inPidWindow(349, { from: 3_999_000, to: 350 })).toBe(true);
    expect(inPidWindow(1000, { from: 3_999_000, to: 350 })).toBe(false);
  });
});
