/**
 * The shared queue's wake-ups carry what changed, and the re-read asks the store for only that:
 * the payload is read as a hint, hints that arrive during a re-read are merged into the next one,
 * and anything unknown (or a poll with no LISTEN connection) still asks for a full re-read.
 */
import fc from 'fast-check';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { QueueSync, wakeOf, type CatchUp, type Wake } from '../../../src/cluster/queue-sync.js';
import type { ResyncHint } from '../../../src/dispatch/job-rows.js';
import { ManualClock } from '../../../src/util/clock.js';

const log = pino({ level: 'silent' });
const settle = () => new Promise<void>((r) => setImmediate(r));

describe('queue wake-up hints', () => {
  it('reads the trigger payloads; anything else asks for everything', () => {
    expect(wakeOf('from:42')).toEqual({ fromSeq: 42 });
    expect(wakeOf('job:j-abc')).toEqual({ ids: ['j-abc'] });
    expect(wakeOf('')).toBe('full');
    expect(wakeOf(undefined)).toBe('full');
    expect(wakeOf('from:not-a-number')).toBe('full');
    expect(wakeOf('something else')).toBe('full');
  });

  it('wake-ups during a re-read merge into one next re-read that covers them all', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.oneof(
            fc.constant<Wake>('full'),
            fc.constant<Wake>({}),
            fc.integer({ min: 1, max: 1e6 }).map<Wake>((n) => ({ fromSeq: n })),
            fc.stringMatching(/^j-[a-f0-9]{4}$/).map<Wake>((id) => ({ ids: [id] })),
          ),
          { minLength: 1, maxLength: 20 },
        ),
        async (wakes) => {
          const calls: (ResyncHint | undefined)[] = [];
          let release!: () => void;
          const sync = new QueueSync({
            url: undefined,
            pollMs: 1e9,
            log,
            clock: new ManualClock(),
            resync: (hint) => {
              calls.push(hint);
              return calls.length === 1 ? new Promise<void>((r) => (release = r)) : Promise.resolve();
            },
          });
          sync.wake({}); // the first re-read is under way while the rest arrive
          for (const w of wakes) sync.wake(w);
          release();
          for (let i = 0; i < 5; i++) await settle();
          await sync.stop();
          expect(calls).toHaveLength(2);
          const next = calls[1];
          if (wakes.includes('full')) return void expect(next).toBeUndefined();
          const hints = wakes as ResyncHint[];
          const seqs = hints.flatMap((h) => (h.fromSeq === undefined ? [] : [h.fromSeq]));
          expect(next?.fromSeq).toBe(seqs.length ? Math.min(...seqs) : undefined);
          expect(new Set(next?.ids)).toEqual(new Set(hints.flatMap((h) => h.ids ?? [])));
        },
      ),
      { numRuns: 50 },
    );
  });

  it('a poll without a LISTEN connection reads everything', async () => {
    const clock = new ManualClock();
    const calls: (ResyncHint | undefined)[] = [];
    const sync = new QueueSync({
      url: undefined,
      pollMs: 100,
      log,
      clock,
      resync: (hint) => Promise.resolve(void calls.push(hint)),
    });
    sync.start();
    clock.advance(100);
    await settle();
    expect(calls).toEqual([undefined]);
    await sync.stop();
  });
});

/**
 * The other channels share the connection: a queue wake-up re-reads the queue and nothing else, a
 * channel that rings runs its own catch-up alone, and the poll (and a new connection) runs them all,
 * the `first` ones before the re-read.
 */
describe('catch-ups by channel', () => {
  function recorder(fail?: string) {
    const calls: string[] = [];
    const run = (name: string) => () => {
      calls.push(name);
      return name === fail ? Promise.reject(new Error(`${name} broke`)) : Promise.resolve();
    };
    const catchUps: CatchUp[] = [
      { channel: 'ch-backoff', run: run('backoff'), first: true },
      { run: run('peers'), first: true },
      { channel: 'ch-reload', run: run('reload') },
      { channel: 'ch-cancel', run: run('cancel') },
    ];
    return {
      calls,
      catchUps,
      resync: (hint?: ResyncHint) => Promise.resolve(void calls.push(hint ? 'hinted' : 'full')),
    };
  }

  it('a queue wake-up re-reads the queue alone; a channel runs its own catch-up alone', async () => {
    const r = recorder();
    const sync = new QueueSync({ url: undefined, pollMs: 1e9, log, clock: new ManualClock(), ...r });
    sync.wake({ fromSeq: 7 });
    await settle();
    expect(r.calls).toEqual(['hinted']);
    for (const ch of ['ch-cancel', 'ch-reload', 'ch-backoff']) {
      r.calls.length = 0;
      sync.ring(ch);
      await settle();
      expect(r.calls).toEqual([ch.slice(3)]);
    }
    await sync.stop();
  });

  it('the poll runs every catch-up, the first ones before the re-read, and one that fails stops no other', async () => {
    const clock = new ManualClock();
    const r = recorder('backoff');
    const sync = new QueueSync({ url: undefined, pollMs: 100, log, clock, ...r });
    sync.start();
    clock.advance(100);
    for (let i = 0; i < 5; i++) await settle();
    expect(r.calls).toEqual(['backoff', 'peers', 'full', 'reload', 'cancel']);
    await sync.stop();
  });

  it('whatever rings during a run, the next run covers exactly that', async () => {
    const event = fc.oneof(
      fc.constant<Wake | string>({ fromSeq: 3 }),
      fc.constant<Wake | string>('full'),
      fc.constantFrom('ch-backoff', 'ch-reload', 'ch-cancel'),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(event, { minLength: 1, maxLength: 12 }), async (events) => {
        const r = recorder();
        let release!: () => void;
        let first = true;
        const sync = new QueueSync({
          url: undefined,
          pollMs: 1e9,
          log,
          clock: new ManualClock(),
          ...r,
          resync: (hint) => {
            r.calls.push(hint ? 'hinted' : 'full');
            if (!first) return Promise.resolve();
            first = false;
            return new Promise<void>((res) => (release = res));
          },
        });
        sync.wake({}); // the first re-read is under way while the rest arrive
        await settle();
        r.calls.length = 0;
        for (const e of events) {
          if (typeof e === 'string' && e.startsWith('ch-')) sync.ring(e);
          else sync.wake(e as Wake);
        }
        release();
        for (let i = 0; i < 5; i++) await settle();
        await sync.stop();
        const full = events.includes('full');
        const queue = events.some((e) => typeof e !== 'string' || e === 'full');
        const rang = new Set(events.filter((e): e is string => typeof e === 'string' && e.startsWith('ch-')));
        const expected = [
          ...(full || rang.has('ch-backoff') ? ['backoff'] : []),
          ...(full ? ['peers'] : []),
          ...(queue ? [full ? 'full' : 'hinted'] : []),
          ...(full || rang.has('ch-reload') ? ['reload'] : []),
          ...(full || rang.has('ch-cancel') ? ['cancel'] : []),
        ];
        expect(r.calls).toEqual(expected);
      }),
      { numRuns: 100 },
    );
  });
});
