import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BatchedLines } from '../../../src/cli/admin/job-logs.js';

describe('BatchedLines', () => {
  it('writes every line, in order, each with its newline, whatever the batch size', () => {
    fc.assert(
      fc.property(fc.array(fc.string()), fc.integer({ min: 1, max: 64 }), (lines, maxBytes) => {
        const chunks: string[] = [];
        const b = new BatchedLines((c) => chunks.push(c), maxBytes);
        for (const l of lines) b.add(l);
        b.flush();
        expect(chunks.join('')).toBe(lines.map((l) => `${l}\n`).join(''));
        expect(chunks.every((c) => c.length > 0)).toBe(true);
      }),
    );
  });

  it('holds small output until flushed, and writes a large batch once it fills', () => {
    const chunks: string[] = [];
    const b = new BatchedLines((c) => chunks.push(c), 10);
    b.add('abc');
    expect(chunks).toEqual([]);
    b.add('defghij');
    expect(chunks).toEqual(['abc\ndefghij\n']);
    b.flush();
    expect(chunks).toHaveLength(1);
  });
});
