import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatBytes, isMemoryString, parseMemoryString } from '../../../src/config/index.js';

const KIB = 1024;
const MIB = 1024 ** 2;
const GIB = 1024 ** 3;

describe('parseMemoryString', () => {
  it.each([
    ['512m', 512 * MIB],
    ['512M', 536870912],
    ['2g', 2147483648],
    ['2G', 2 * GIB],
    ['1024k', 1048576],
    ['1024K', 1024 * KIB],
    ['1.5g', 1610612736],
    ['512 m', 536870912],
    ['0k', 0],
    ['0.5k', 512],
    ['1.0001k', 1024], // floored to whole bytes
    ['007m', 7 * MIB],
  ])('%s -> %d bytes', (input, bytes) => {
    expect(parseMemoryString(input)).toBe(bytes);
  });

  it.each([
    '',
    '2',
    '2gb',
    '2Gi',
    '-1g',
    'g',
    '1t',
    ' 2g',
    '2g ',
    '1.g',
    '.5g',
    '1,5g',
    '2 gb',
    '+1g',
    '1e3m',
    '0x10m',
    '２g',
  ])('rejects %j with the exact message', (input) => {
    expect(() => parseMemoryString(input)).toThrow(
      `Invalid memory format: "${input}". Expected format like "512m", "2g", or "1024k".`,
    );
  });

  it('rejects a digit string so long the value overflows', () => {
    expect(() => parseMemoryString(`${'9'.repeat(400)}g`)).toThrow(/Invalid memory format/);
  });

  it('round-trips n x unit for k/m/g in either case, with or without one space', () => {
    fc.assert(
      fc.property(
        fc.nat({ max: 1_000_000 }),
        fc.constantFrom(['k', 1], ['m', 2], ['g', 3]),
        fc.boolean(),
        fc.boolean(),
        (n, [unit, power], upper, space) => {
          const text = `${n}${space ? ' ' : ''}${upper ? unit.toUpperCase() : unit}`;
          expect(parseMemoryString(text)).toBe(n * 1024 ** power);
          expect(isMemoryString(text)).toBe(true);
        },
      ),
    );
  });

  it('floors fractional values', () => {
    fc.assert(
      fc.property(
        fc.nat({ max: 100_000 }),
        fc.nat({ max: 999 }),
        fc.constantFrom(['k', 1], ['m', 2], ['g', 3]),
        (n, frac, [unit, p]) => {
          const text = `${n}.${String(frac).padStart(3, '0')}${unit}`;
          expect(parseMemoryString(text)).toBe(
            Math.floor(Number(`${n}.${String(frac).padStart(3, '0')}`) * 1024 ** p),
          );
        },
      ),
    );
  });

  it('rejects junk: unit suffixes with extra letters, signs, unknown units, leading space, no unit', () => {
    const junk = fc.oneof(
      fc.nat().map((n) => `${n}gb`),
      fc.nat().map((n) => `${n}Gi`),
      fc.nat().map((n) => `-${n}g`),
      fc.nat().map((n) => `${n}t`),
      fc.nat().map((n) => ` ${n}m`),
      fc.nat().map((n) => `${n}`),
      fc.constant(''),
      fc.string().filter((s) => !/^\d+(\.\d+)?\s*[kmg]$/i.test(s)),
    );
    fc.assert(
      fc.property(junk, (text) => {
        expect(() => parseMemoryString(text)).toThrow(/^Invalid memory format: /);
        expect(isMemoryString(text)).toBe(false);
      }),
    );
  });

  it('throws for a non-string at runtime instead of crashing', () => {
    expect(() => parseMemoryString(5 as unknown as string)).toThrow(/Invalid memory format: "5"/);
    expect(isMemoryString(5)).toBe(false);
  });
});

describe('formatBytes', () => {
  it.each([
    [0, '0 B'],
    [1023, '1023 B'],
    [1024, '1 KiB'],
    [1536 * MIB, '1.5 GiB'],
    [64 * GIB, '64 GiB'],
  ])('%d -> %s', (bytes, text) => expect(formatBytes(bytes)).toBe(text));
});
