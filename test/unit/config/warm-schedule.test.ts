/**
 * Scheduled warm-pool sizes: the entry that fired last sets the size, in its own time zone, across
 * daylight-saving steps; bad entries are refused with the YAML path and line.
 */
import fc from 'fast-check';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { formatConfigError, loadScalerConfig } from '../../../src/config/index.js';
import {
  compileWarmSchedule,
  nextWarmChange,
  warmSizeAt,
  type WarmScheduleEntry,
} from '../../../src/config/warm-schedule.js';

const berlin: WarmScheduleEntry[] = [
  { cron: '0 8 * * 1-5', size: 10, timezone: 'Europe/Berlin' },
  { cron: '0 18 * * 1-5', size: 2, timezone: 'Europe/Berlin' },
];
const at = (iso: string) => new Date(iso).getTime();

describe('warmSizeAt', () => {
  const s = compileWarmSchedule(berlin);

  it('follows a Berlin working day across the spring step (CET to CEST)', () => {
    // Friday 26 March 2027 is still CET (UTC+1): 08:00 local is 07:00 UTC.
    expect(warmSizeAt(s, 0, at('2027-03-26T06:59:59Z')).size).toBe(2);
    expect(warmSizeAt(s, 0, at('2027-03-26T07:00:00Z'))).toEqual({ size: 10, entry: 0 });
    expect(warmSizeAt(s, 0, at('2027-03-26T16:59:59Z')).size).toBe(10);
    expect(warmSizeAt(s, 0, at('2027-03-26T17:00:00Z'))).toEqual({ size: 2, entry: 1 });
    // The weekend keeps Friday evening's size; the clocks go forward on Sunday 28 March.
    expect(warmSizeAt(s, 0, at('2027-03-28T12:00:00Z')).size).toBe(2);
    // Monday 29 March is CEST (UTC+2): 08:00 local is 06:00 UTC, an hour earlier than on Friday.
    expect(warmSizeAt(s, 0, at('2027-03-29T05:59:59Z')).size).toBe(2);
    expect(warmSizeAt(s, 0, at('2027-03-29T06:00:00Z')).size).toBe(10);
    expect(warmSizeAt(s, 0, at('2027-03-29T16:00:00Z')).size).toBe(2);
  });

  it('and back across the autumn step (CEST to CET)', () => {
    // Friday 29 October 2027 is CEST; the clocks go back on Sunday 31 October.
    expect(nextWarmChange(s, at('2027-10-29T05:00:00Z'))).toEqual({
      atMs: at('2027-10-29T06:00:00Z'),
      size: 10,
      entry: 0,
    });
    expect(nextWarmChange(s, at('2027-10-30T00:00:00Z'))).toEqual({
      atMs: at('2027-11-01T07:00:00Z'),
      size: 10,
      entry: 0,
    });
    expect(warmSizeAt(s, 0, at('2027-11-01T06:59:59Z')).size).toBe(2);
    expect(warmSizeAt(s, 0, at('2027-11-01T07:00:00Z')).size).toBe(10);
  });

  it('a local time skipped by the spring step still fires, once, just after the gap', () => {
    const gap = compileWarmSchedule([{ cron: '30 2 * * *', size: 4, timezone: 'Europe/Berlin' }]);
    expect(nextWarmChange(gap, at('2027-03-28T00:00:00Z'))!.atMs).toBe(at('2027-03-28T01:00:00Z'));
    expect(warmSizeAt(gap, 1, at('2027-03-28T00:59:59Z')).entry).not.toBeNull();
  });

  it('the plain size holds until some entry has fired', () => {
    const once = compileWarmSchedule([{ cron: '0 9 1 1 *', size: 7, timezone: 'UTC' }]);
    // Every recurring entry has fired at some point before; a yearly one has, too.
    expect(warmSizeAt(once, 3, at('2027-06-01T00:00:00Z')).size).toBe(7);
    expect(warmSizeAt(compileWarmSchedule([]), 3, at('2027-06-01T00:00:00Z'))).toEqual({
      size: 3,
      entry: null,
    });
  });

  it('property: the size only changes at the moments nextWarmChange names, and to their size', () => {
    const entry = fc.record({
      cron: fc
        .tuple(
          fc.integer({ min: 0, max: 59 }),
          fc.integer({ min: 0, max: 23 }),
          fc.constantFrom('*', '1-5', '0,6', '3'),
        )
        .map(([m, h, dow]) => `${m} ${h} * * ${dow}`),
      size: fc.integer({ min: 0, max: 20 }),
      timezone: fc.constantFrom('UTC', 'Europe/Berlin', 'America/New_York', 'Asia/Kolkata'),
    });
    fc.assert(
      fc.property(
        fc.array(entry, { minLength: 1, maxLength: 4 }),
        fc.integer({ min: at('2027-01-01T00:00:00Z'), max: at('2027-12-20T00:00:00Z') }),
        (entries, start) => {
          const s = compileWarmSchedule(entries);
          let t = start;
          let size = warmSizeAt(s, 0, t).size;
          for (let i = 0; i < 5; i++) {
            const next = nextWarmChange(s, t)!;
            expect(next.atMs).toBeGreaterThan(t);
            // Just before the named moment nothing has changed; at it, the named size holds
            // (unless another entry fires at the same instant and wins as the later one).
            expect(warmSizeAt(s, 0, next.atMs - 1).size).toBe(size);
            const now = warmSizeAt(s, 0, next.atMs);
            expect(now.entry).toBe(next.entry);
            expect(now.size).toBe(next.size);
            size = now.size;
            t = next.atMs;
          }
        },
      ),
      { numRuns: 60 },
    );
  });
});

describe('warmPool.schedule in scalers.yaml', () => {
  async function problems(schedule: string): Promise<string[]> {
    const dir = await mkdtemp(join(tmpdir(), 'kici-warm-sched-'));
    try {
      const main = join(dir, 'scalers.yaml');
      await writeFile(
        main,
        [
          'version: 1',
          'scalers:',
          '  - name: bm',
          '    type: bare-metal',
          '    maxAgents: 4',
          '    labelSets: [{ labels: [linux], binaryPath: /usr/bin/true }]',
          '    warmPool:',
          '      enabled: true',
          '      size: 1',
          '      schedule:',
          schedule,
        ].join('\n') + '\n',
      );
      const err = await loadScalerConfig(main).then(
        () => undefined,
        (e: unknown) => e,
      );
      return err === undefined
        ? []
        : formatConfigError(err, { configPath: main }).map((l) => l.replace(dir, ''));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  it('accepts a valid schedule, with UTC as the default time zone', async () => {
    expect(await problems('        - { cron: "0 8 * * 1-5", size: 3 }')).toEqual([]);
  });

  it('names the path, the problem and the line of a bad cron expression and time zone', async () => {
    const out = await problems(
      [
        '        - { cron: "0 8 * * 1-5", size: 3, timezone: Europe/Berlin }',
        '        - cron: "0 25 * * *"',
        '          size: 1',
        '          timezone: Mars/Base',
      ].join('\n'),
    );
    expect(out).toHaveLength(2);
    expect(out[0]).toMatch(
      /scalers\[0\]\.warmPool\.schedule\[1\]\.cron: "0 25 \* \* \*" is not a five-field cron expression.*\(line 12\)/,
    );
    expect(out[1]).toMatch(
      /scalers\[0\]\.warmPool\.schedule\[1\]\.timezone: unknown time zone "Mars\/Base".*\(line 14\)/,
    );
  });

  it('refuses a six-field (seconds) pattern and a negative size', async () => {
    const out = await problems('        - { cron: "0 0 8 * * *", size: -1 }');
    expect(out.join('\n')).toMatch(/schedule\[0\]\.cron: .*five-field/);
    expect(out.join('\n')).toMatch(/schedule\[0\]\.size/);
  });
});
