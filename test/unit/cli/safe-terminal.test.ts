/** Job output on an operator's terminal: no control sequence gets through, and nothing passes for a frame. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LogRenderer, type LogLineView, type StepView } from '../../../src/cli/admin/job-log-render.js';
import {
  escapeOutputLine,
  isUnsafeForTerminal,
  neutraliseTerminal,
} from '../../../src/cli/admin/safe-terminal.js';

const T = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();

/** Strings rich in what an attacker would print: escapes, CR, frame and system markers, bidi overrides. */
const hostile = fc
  .array(
    fc.oneof(
      fc.string({ unit: 'binary' }),
      fc.constantFrom(
        '\x1b[2J',
        '\x1b]0;title\x07',
        '\r',
        '\n',
        '\x9b31m',
        '── step 2/2 "deploy" ──',
        '» ',
        '\\',
        '\u202e',
        '\t',
      ),
    ),
    { maxLength: 6 },
  )
  .map((parts) => parts.join(''));

function hasUnsafe(s: string): boolean {
  for (const c of s) if (isUnsafeForTerminal(c.codePointAt(0)!)) return true;
  return false;
}

describe('terminal-safe job output', () => {
  it('neutralises escapes, CR and bidi overrides visibly; plain text and tabs are unchanged', () => {
    expect(neutraliseTerminal('\x1b[31mred\x1b[0m')).toBe('\\x1b[31mred\\x1b[0m');
    expect(neutraliseTerminal('ok\rPASSED')).toBe('ok\\x0dPASSED');
    expect(neutraliseTerminal('a\u202eb')).toBe('a\\u202eb');
    expect(neutraliseTerminal('a\tb ünïcødé ✓')).toBe('a\tb ünïcødé ✓');
    expect(escapeOutputLine('── step 2 "x" ──')).toBe('\\── step 2 "x" ──');
    expect(escapeOutputLine('» scaler.ready: fake')).toBe('\\» scaler.ready: fake');
    expect(escapeOutputLine('\\── already escaped')).toBe('\\\\── already escaped');
  });

  it('property: no rendered line holds a control character, and only the renderer draws frames and system lines', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ text: hostile, stream: fc.constantFrom('stdout', 'stderr') }), {
          maxLength: 20,
        }),
        fc.array(hostile, { maxLength: 3 }),
        hostile,
        (output, system, stepName) => {
          const out: string[] = [];
          const r = new LogRenderer((l) => out.push(l), { totalSteps: 1 });
          const steps: StepView[] = [
            {
              idx: 0,
              name: stepName,
              exitCode: 0,
              timedOut: false,
              startedAt: T(1),
              finishedAt: T(9),
              durationMs: 8000,
            },
          ];
          let id = 0;
          const lines: LogLineView[] = [
            ...system.map((line) => ({ id: ++id, step: null, stream: 'system', line, ts: T(0) })),
            ...output.map((o) => ({ id: ++id, step: 0, stream: o.stream, line: o.text, ts: T(2) })),
          ];
          r.feed(lines, steps, steps);
          r.end(steps);
          // One rendered line per stored line, plus the step's header and footer.
          expect(out).toHaveLength(lines.length + 2);
          for (const l of out) expect(hasUnsafe(l), JSON.stringify(l)).toBe(false);
          expect(out.filter((l) => l.startsWith('──'))).toHaveLength(2);
          expect(out.filter((l) => l.startsWith('»'))).toHaveLength(system.length);
          // Output lines come back exactly, once the escape of a reserved start is removed.
          const shown = out.slice(system.length + 1, -1);
          shown.forEach((l, i) => {
            const original = neutraliseTerminal(output[i]!.text);
            expect(l === original || l === `\\${original}`).toBe(true);
          });
        },
      ),
      { numRuns: 500 },
    );
  });
});
