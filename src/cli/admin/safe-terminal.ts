/**
 * Text from a job (its output, its step names) is shown on an operator's terminal. Control
 * characters there are commands, not text: an escape sequence can recolour, move the cursor, rewrite
 * lines already shown, set the window title or, on some terminals, answer back as typed input. A
 * carriage return overwrites the line it is on, and bidirectional overrides reorder what is read.
 * Each of them is shown as a visible escape instead (`\x1b`, `\u202e`); a tab stays a tab.
 */
/** Code points that act on a terminal instead of being shown (a tab, 0x09, is left alone). */
const UNSAFE_RANGES: readonly (readonly [number, number])[] = [
  [0x00, 0x08],
  [0x0a, 0x1f],
  [0x7f, 0x9f],
  [0x61c, 0x61c],
  [0x200e, 0x200f],
  [0x2028, 0x2029],
  [0x202a, 0x202e],
  [0x2066, 0x2069],
];

export function isUnsafeForTerminal(code: number): boolean {
  return UNSAFE_RANGES.some(([a, b]) => code >= a && code <= b);
}

export function neutraliseTerminal(text: string): string {
  let out = '';
  for (const c of text) {
    const code = c.codePointAt(0)!;
    if (!isUnsafeForTerminal(code)) out += c;
    else
      out +=
        code <= 0xff
          ? `\\x${code.toString(16).padStart(2, '0')}`
          : `\\u${code.toString(16).padStart(4, '0')}`;
  }
  return out;
}

/**
 * How the log renderer marks its own lines: step frames begin with `──`, system lines with `»`. A
 * job's output line that begins like one of them (or with the `\` this escape uses) is shown with
 * a leading `\`, so no output line can pass for a frame or a system line.
 */
const RESERVED_START = /^(──|»|\\)/;

export function escapeOutputLine(line: string): string {
  const safe = neutraliseTerminal(line);
  return RESERVED_START.test(safe) ? `\\${safe}` : safe;
}
