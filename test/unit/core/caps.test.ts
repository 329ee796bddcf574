import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CapBook, type CapBlocker, type CapLimits, type Reservation } from '../../../src/scaler/core/caps.js';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

function limits(over: Partial<CapLimits> = {}): CapLimits {
  return {
    globalMaxAgents: 4,
    globalResourceCap: { maxCpu: 6, maxMemoryBytes: 8 * GiB },
    scalers: new Map([
      ['a', { maxAgents: 2, resourceCap: { maxCpu: 2, maxMemoryBytes: 2 * GiB } }],
      ['b', { maxAgents: 10 }],
    ]),
    ...over,
  };
}

let nextId = 0;
function res(scalerName: string, cpus = 0, memBytes = 0, agentId = `ag-${++nextId}`): Reservation {
  return {
    agentId,
    scalerName,
    requests: { cpus, memBytes },
    limits: { cpus: cpus * 2, memBytes: memBytes * 2 },
  };
}

const noLive = { global: 0, scaler: 0 };

function refused(book: CapBook, r: Reservation, live = noLive): { blocker: CapBlocker; reason: string } {
  const out = book.reserve(r, live);
  if (out.ok) throw new Error(`expected ${r.agentId} on ${r.scalerName} to be refused`);
  return out;
}

describe('CapBook count caps', () => {
  it('refuses at globalMaxAgents and names the cap', () => {
    const book = new CapBook(limits({ globalMaxAgents: 3 }));
    for (let i = 0; i < 3; i++) expect(book.reserve(res('b'), noLive)).toEqual({ ok: true });
    const out = refused(book, res('b'));
    expect(out.blocker).toBe('global-count');
    expect(out.reason).toContain('globalMaxAgents');
    expect(out.reason).toContain('3/3');
    expect(book.count()).toBe(3);
  });

  it('compares the global count with max(live, reservations), not their sum', () => {
    const book = new CapBook(limits({ globalMaxAgents: 3 }));
    book.reserve(res('b'), noLive);
    book.reserve(res('b'), noLive);
    // 2 reservations and 2 live agents: max is 2 < 3, a sum would be 4.
    expect(book.reserve(res('b'), { global: 2, scaler: 2 }).ok).toBe(true);
    // Live agents the book holds no reservation for still count.
    const fresh = new CapBook(limits({ globalMaxAgents: 3 }));
    expect(refused(fresh, res('b'), { global: 3, scaler: 0 }).blocker).toBe('global-count');
    expect(fresh.count()).toBe(0);
  });

  it('refuses at a scaler maxAgents, counting reservations or live agents, and names scaler and cap', () => {
    const book = new CapBook(limits());
    book.reserve(res('a'), noLive);
    book.reserve(res('a'), noLive);
    const out = refused(book, res('a'));
    expect(out.blocker).toBe('scaler-count');
    expect(out.reason).toContain('"a"');
    expect(out.reason).toContain('maxAgents');
    expect(out.reason).toContain('2/2');
    // Another scaler is not affected.
    expect(book.reserve(res('b'), noLive).ok).toBe(true);

    const live = new CapBook(limits());
    expect(refused(live, res('a'), { global: 2, scaler: 2 }).blocker).toBe('scaler-count');
    expect(live.reserve(res('a'), { global: 1, scaler: 1 }).ok).toBe(true);
  });

  it('refuses a scaler that is not configured', () => {
    const book = new CapBook(limits());
    const out = refused(book, res('ghost'));
    expect(out.blocker).toBe('scaler-count');
    expect(out.reason).toContain('"ghost"');
    expect(out.reason).toContain('not configured');
  });

  it('checks the global count before anything about the scaler', () => {
    const book = new CapBook(limits({ globalMaxAgents: 1 }));
    book.reserve(res('b'), noLive);
    expect(refused(book, res('ghost')).blocker).toBe('global-count');
    expect(refused(book, res('a', 100, 100 * GiB)).blocker).toBe('global-count');
  });
});

describe('CapBook resource caps', () => {
  it('allows reaching a scaler cpu cap exactly and refuses going past it', () => {
    const book = new CapBook(limits());
    expect(book.reserve(res('a', 1.5), noLive).ok).toBe(true);
    expect(book.reserve(res('a', 0.5), noLive).ok).toBe(true);
    expect(book.usage('a').cpus).toBe(2);
    const over = new CapBook(limits());
    over.reserve(res('a', 1.5), noLive);
    const out = refused(over, res('a', 0.75));
    expect(out.blocker).toBe('scaler-cpu');
    expect(out.reason).toMatch(/scaler "a" cpu cap/);
    expect(out.reason).toContain('1.50 used + 0.75 requested > 2');
  });

  it('refuses past a scaler memory cap and names it', () => {
    const book = new CapBook(limits());
    expect(book.reserve(res('a', 0, 1 * GiB), noLive).ok).toBe(true);
    expect(book.reserve(res('a', 0, 1 * GiB + 1), { global: 0, scaler: 0 }).ok).toBe(false);
    const out = refused(book, res('a', 0, 1536 * MiB));
    expect(out.blocker).toBe('scaler-memory');
    expect(out.reason).toMatch(/scaler "a" memory cap/);
    expect(out.reason).toContain('1024MiB used + 1536MiB requested > 2048MiB');
  });

  it('refuses past the global cpu and memory caps, which sum over scalers', () => {
    const book = new CapBook(limits());
    expect(book.reserve(res('a', 2, 2 * GiB), noLive).ok).toBe(true);
    expect(book.reserve(res('b', 3, 5 * GiB), noLive).ok).toBe(true);
    const cpu = refused(book, res('b', 1.5));
    expect(cpu.blocker).toBe('global-cpu');
    expect(cpu.reason).toContain('global cpu cap');
    const mem = refused(book, res('b', 1, 2 * GiB));
    expect(mem.blocker).toBe('global-memory');
    expect(mem.reason).toContain('global memory cap');
    expect(book.reserve(res('b', 1, 1 * GiB), noLive).ok).toBe(true);
    expect(book.usage()).toEqual({ cpus: 6, memBytes: 8 * GiB });
  });

  it('reports the first cap hit in the order scaler cpu, scaler memory, global cpu, global memory', () => {
    const tight = limits({ globalResourceCap: { maxCpu: 1, maxMemoryBytes: 1 * GiB } });
    expect(refused(new CapBook(tight), res('a', 3, 3 * GiB)).blocker).toBe('scaler-cpu');
    expect(refused(new CapBook(tight), res('a', 1.5, 3 * GiB)).blocker).toBe('scaler-memory');
    expect(refused(new CapBook(tight), res('a', 1.5, 1.5 * GiB)).blocker).toBe('global-cpu');
    expect(refused(new CapBook(tight), res('a', 1, 1.5 * GiB)).blocker).toBe('global-memory');
  });

  it('leaves usage and counts untouched when it refuses', () => {
    const book = new CapBook(limits());
    book.reserve(res('a', 1, 1 * GiB), noLive);
    const before = { count: book.count(), a: book.usage('a'), all: book.usage() };
    refused(book, res('a', 5));
    refused(book, res('ghost', 1));
    expect({ count: book.count(), a: book.usage('a'), all: book.usage() }).toEqual(before);
  });

  it('treats missing caps as unlimited', () => {
    const book = new CapBook({ globalMaxAgents: 100, scalers: new Map([['b', { maxAgents: 100 }]]) });
    expect(book.reserve(res('b', 256, 1024 * GiB), noLive).ok).toBe(true);
    expect(book.reserve(res('b', 256, 1024 * GiB), noLive).ok).toBe(true);
  });
});

describe('CapBook bookkeeping', () => {
  it('counts a repeated reservation for the same agent once', () => {
    const book = new CapBook(limits());
    const r = res('a', 1, GiB);
    expect(book.reserve(r, noLive).ok).toBe(true);
    expect(book.reserve({ ...r, requests: { cpus: 2, memBytes: 2 * GiB } }, noLive).ok).toBe(true);
    book.add(r);
    expect(book.count()).toBe(1);
    expect(book.count('a')).toBe(1);
    expect(book.usage('a')).toEqual({ cpus: 1, memBytes: GiB });
    expect(book.get(r.agentId)).toBe(r);
  });

  it('releases idempotently and returns the reservation once', () => {
    const book = new CapBook(limits());
    const r = res('a', 1, GiB);
    const other = res('b', 0.5, 512 * MiB);
    book.reserve(r, noLive);
    book.reserve(other, noLive);
    expect(book.release(r.agentId)).toBe(r);
    expect(book.release(r.agentId)).toBeUndefined();
    expect(book.release('never-reserved')).toBeUndefined();
    expect(book.count('a')).toBe(0);
    expect(book.usage('a')).toEqual({ cpus: 0, memBytes: 0 });
    expect(book.usage()).toEqual({ cpus: 0.5, memBytes: 512 * MiB });
    expect(book.all()).toEqual([other]);
  });

  it('frees a slot on release', () => {
    const book = new CapBook(limits());
    const first = res('a');
    book.reserve(first, noLive);
    book.reserve(res('a'), noLive);
    expect(book.reserve(res('a'), noLive).ok).toBe(false);
    book.release(first.agentId);
    expect(book.reserve(res('a'), noLive).ok).toBe(true);
  });

  it.each([
    { cpus: [0.1, 0.2], order: [0, 1] },
    { cpus: [0.1, 0.2], order: [1, 0] },
    { cpus: [0.1, 0.7], order: [1, 0] },
    { cpus: [0.3, 0.6, 0.1], order: [2, 0, 1] },
  ])('comes back to exactly zero usage after releasing $cpus in order $order', ({ cpus, order }) => {
    const book = new CapBook(limits());
    const rs = cpus.map((c) => res('b', c, 0));
    for (const r of rs) book.reserve(r, noLive);
    for (const i of order) book.release(rs[i]!.agentId);
    expect(book.usage('b')).toEqual({ cpus: 0, memBytes: 0 });
    expect(book.usage()).toEqual({ cpus: 0, memBytes: 0 });
    expect(book.count()).toBe(0);
  });

  it('never reports negative usage', () => {
    const book = new CapBook(limits());
    const rs = [res('b', 0.1), res('b', 0.7)];
    for (const r of rs) book.reserve(r, noLive);
    book.release(rs[1]!.agentId);
    book.release(rs[0]!.agentId);
    expect(book.usage('b').cpus).toBeGreaterThanOrEqual(0);
    expect(book.usage().cpus).toBeGreaterThanOrEqual(0);
  });

  it('records a recovered reservation without checking, then refuses further work', () => {
    const book = new CapBook(limits());
    book.add(res('a', 5, 0));
    expect(book.usage('a').cpus).toBe(5);
    expect(refused(book, res('a', 0.5)).blocker).toBe('scaler-cpu');
  });

  it('clones into an independent book with the same reservations', () => {
    const book = new CapBook(limits());
    const kept = res('a', 1, GiB);
    book.reserve(kept, noLive);
    const copy = book.clone();
    expect(copy.count()).toBe(1);
    expect(copy.usage('a')).toEqual({ cpus: 1, memBytes: GiB });
    // Planning on the copy leaves the real book alone, and the other way round.
    expect(copy.reserve(res('a', 1, 0), noLive).ok).toBe(true);
    expect(copy.reserve(res('a'), noLive).ok).toBe(false);
    expect(book.count('a')).toBe(1);
    book.release(kept.agentId);
    expect(copy.get(kept.agentId)).toBe(kept);
    expect(copy.usage('a').cpus).toBe(2);
    expect(book.usage()).toEqual({ cpus: 0, memBytes: 0 });
  });

  it('names the global count and cap of the moment in each refusal, also when the last was the same', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ live: fc.nat({ max: 9 }), max: fc.integer({ min: 1, max: 6 }) }), {
          minLength: 1,
          maxLength: 30,
        }),
        (asks) => {
          const book = new CapBook(limits());
          for (const { live, max } of asks) {
            book.setLimits(limits({ globalMaxAgents: max }));
            const out = book.check('b', { cpus: 0, memBytes: 0 }, { global: live, scaler: 0 });
            if (live < max) expect(out.ok).toBe(true);
            else
              expect(out).toEqual({
                ok: false,
                blocker: 'global-count',
                reason: `globalMaxAgents reached (${live}/${max})`,
              });
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('applies new limits at the next decision', () => {
    const book = new CapBook(limits());
    book.reserve(res('a'), noLive);
    book.reserve(res('a'), noLive);
    expect(book.reserve(res('a'), noLive).ok).toBe(false);
    book.setLimits(limits({ scalers: new Map([['a', { maxAgents: 3 }]]) }));
    expect(book.reserve(res('a'), noLive).ok).toBe(true);
  });
});

describe('CapBook properties', () => {
  const SCALERS = ['a', 'b', 'c', 'ghost'];
  /** Cpu amounts in tenths, so the model can add them exactly. */
  const CPU_TENTHS = [0, 1, 2, 3, 5, 7, 10, 15, 30];
  const MEM = [0, 256 * MiB, 512 * MiB, GiB, 3 * GiB];

  const limitsArb = fc.record({
    globalMaxAgents: fc.integer({ min: 1, max: 12 }),
    globalCpuTenths: fc.option(fc.integer({ min: 1, max: 80 }), { nil: undefined }),
    globalMem: fc.option(fc.constantFrom(GiB, 4 * GiB, 10 * GiB), { nil: undefined }),
    scalers: fc.tuple(
      ...['a', 'b', 'c'].map(() =>
        fc.record({
          maxAgents: fc.integer({ min: 1, max: 8 }),
          cpuTenths: fc.option(fc.integer({ min: 1, max: 40 }), { nil: undefined }),
          mem: fc.option(fc.constantFrom(GiB, 2 * GiB, 6 * GiB), { nil: undefined }),
        }),
      ),
    ),
  });

  const opArb = fc.oneof(
    fc.record({
      kind: fc.constant('reserve' as const),
      agent: fc.integer({ min: 0, max: 24 }),
      scaler: fc.constantFrom(...SCALERS),
      cpuTenths: fc.constantFrom(...CPU_TENTHS),
      mem: fc.constantFrom(...MEM),
      liveGlobal: fc.nat(),
      liveScaler: fc.nat(),
    }),
    fc.record({ kind: fc.constant('release' as const), agent: fc.integer({ min: 0, max: 24 }) }),
  );

  it('keeps every cap, agrees with a simple model and returns to zero', () => {
    fc.assert(
      fc.property(limitsArb, fc.array(opArb, { maxLength: 80 }), (lim, ops) => {
        const capOf = (t: number | undefined) => (t === undefined ? undefined : t / 10);
        const scalerLimits = new Map(
          ['a', 'b', 'c'].map((name, i) => {
            const s = lim.scalers[i]!;
            const resourceCap: { maxCpu?: number; maxMemoryBytes?: number } = {};
            if (s.cpuTenths !== undefined) resourceCap.maxCpu = capOf(s.cpuTenths)!;
            if (s.mem !== undefined) resourceCap.maxMemoryBytes = s.mem;
            return [name, { maxAgents: s.maxAgents, resourceCap }] as const;
          }),
        );
        const globalResourceCap: { maxCpu?: number; maxMemoryBytes?: number } = {};
        if (lim.globalCpuTenths !== undefined) globalResourceCap.maxCpu = capOf(lim.globalCpuTenths)!;
        if (lim.globalMem !== undefined) globalResourceCap.maxMemoryBytes = lim.globalMem;
        const book = new CapBook({
          globalMaxAgents: lim.globalMaxAgents,
          globalResourceCap,
          scalers: scalerLimits,
        });

        // The model: reservations by agent, amounts in tenths of a cpu and bytes.
        const model = new Map<string, { scaler: string; tenths: number; mem: number }>();
        const sum = (scaler?: string) => {
          let tenths = 0;
          let mem = 0;
          let count = 0;
          for (const r of model.values()) {
            if (scaler !== undefined && r.scaler !== scaler) continue;
            tenths += r.tenths;
            mem += r.mem;
            count++;
          }
          return { tenths, mem, count };
        };
        const expectedBlocker = (
          scaler: string,
          tenths: number,
          mem: number,
          live: { global: number; scaler: number },
        ) => {
          if (Math.max(live.global, model.size) >= lim.globalMaxAgents) return 'global-count';
          const s = scalerLimits.get(scaler);
          if (!s) return 'scaler-count';
          const used = sum(scaler);
          if (Math.max(live.scaler, used.count) >= s.maxAgents) return 'scaler-count';
          const sc = lim.scalers[['a', 'b', 'c'].indexOf(scaler)]!;
          if (sc.cpuTenths !== undefined && used.tenths + tenths > sc.cpuTenths) return 'scaler-cpu';
          if (sc.mem !== undefined && used.mem + mem > sc.mem) return 'scaler-memory';
          const all = sum();
          if (lim.globalCpuTenths !== undefined && all.tenths + tenths > lim.globalCpuTenths)
            return 'global-cpu';
          if (lim.globalMem !== undefined && all.mem + mem > lim.globalMem) return 'global-memory';
          return undefined;
        };

        for (const op of ops) {
          const agentId = `ag-${op.agent}`;
          if (op.kind === 'release') {
            const had = model.get(agentId);
            const out = book.release(agentId);
            expect(out?.scalerName).toBe(had?.scaler);
            model.delete(agentId);
          } else {
            // Live counts never exceed the reservations the book holds.
            const live = {
              global: model.size === 0 ? 0 : op.liveGlobal % (model.size + 1),
              scaler: op.liveScaler % (sum(op.scaler).count + 1),
            };
            const out = book.reserve(
              {
                agentId,
                scalerName: op.scaler,
                requests: { cpus: op.cpuTenths / 10, memBytes: op.mem },
                limits: { cpus: op.cpuTenths / 10, memBytes: op.mem },
              },
              live,
            );
            if (model.has(agentId)) {
              expect(out).toEqual({ ok: true });
            } else {
              const want = expectedBlocker(op.scaler, op.cpuTenths, op.mem, live);
              if (want === undefined) {
                expect(out).toEqual({ ok: true });
                model.set(agentId, { scaler: op.scaler, tenths: op.cpuTenths, mem: op.mem });
              } else {
                expect(out.ok).toBe(false);
                if (!out.ok) expect(out.blocker).toBe(want);
              }
            }
          }

          // Invariants after every step.
          expect(book.count()).toBe(model.size);
          expect(book.count()).toBeLessThanOrEqual(lim.globalMaxAgents);
          const all = sum();
          expect(book.usage().cpus).toBeCloseTo(all.tenths / 10, 9);
          expect(book.usage().memBytes).toBe(all.mem);
          if (lim.globalCpuTenths !== undefined)
            expect(book.usage().cpus).toBeLessThanOrEqual(lim.globalCpuTenths / 10 + 1e-9);
          if (lim.globalMem !== undefined) expect(book.usage().memBytes).toBeLessThanOrEqual(lim.globalMem);
          ['a', 'b', 'c'].forEach((name, i) => {
            const s = lim.scalers[i]!;
            const mine = sum(name);
            expect(book.count(name)).toBe(mine.count);
            expect(book.count(name)).toBeLessThanOrEqual(s.maxAgents);
            expect(book.usage(name).cpus).toBeCloseTo(mine.tenths / 10, 9);
            expect(book.usage(name).memBytes).toBe(mine.mem);
            if (s.cpuTenths !== undefined)
              expect(book.usage(name).cpus).toBeLessThanOrEqual(s.cpuTenths / 10 + 1e-9);
            if (s.mem !== undefined) expect(book.usage(name).memBytes).toBeLessThanOrEqual(s.mem);
          });
          expect(book.count('ghost')).toBe(0);
        }

        for (const r of book.all()) book.release(r.agentId);
        expect(book.count()).toBe(0);
        expect(book.usage()).toEqual({ cpus: 0, memBytes: 0 });
        for (const name of SCALERS) {
          expect(book.count(name)).toBe(0);
          expect(book.usage(name)).toEqual({ cpus: 0, memBytes: 0 });
        }
      }),
      { numRuns: 400 },
    );
  });
});
