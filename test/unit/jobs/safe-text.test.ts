import { describe, expect, it } from 'vitest';
import { clip, findUnsafeText, quote, textProblem, toWellFormedText } from '../../../src/jobs/safe-text.js';

describe('safe text', () => {
  it('finds NUL and lone surrogates in values and keys, naming the path', () => {
    expect(findUnsafeText({ a: ['ok', 'x\u0000'], b: { 'k\ud800': 1 }, c: '\udc00' })).toEqual([
      'a[1]: must not contain a NUL byte (U+0000)',
      'b: the key "k\uFFFD" must not contain a lone UTF-16 surrogate (invalid Unicode)',
      'c: must not contain a lone UTF-16 surrogate (invalid Unicode)',
    ]);
    expect(findUnsafeText({ ok: 'fine \ud83d\ude00', n: [1, null, true] })).toEqual([]);
  });

  it('refuses nesting deeper than 32 levels without recursing', () => {
    let deep: unknown = 'x';
    for (let i = 0; i < 100_000; i++) deep = [deep];
    expect(findUnsafeText(deep)[0]).toMatch(/nested more than 32 levels deep$/);
  });

  it('clips and quotes long or odd input', () => {
    expect(clip('a'.repeat(1000))).toBe('a'.repeat(100) + '…');
    expect(clip('a'.repeat(99) + '\ud83d\ude00')).toBe('a'.repeat(99) + '…');
    expect(quote('a\u0000\ud800')).toBe('"a\\u0000\uFFFD"');
    expect(toWellFormedText('x\udc00\ud83d\ude00')).toBe('x\uFFFD\ud83d\ude00');
    expect(textProblem('plain')).toBeUndefined();
  });
});
