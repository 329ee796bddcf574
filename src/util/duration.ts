const UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/**
 * A duration an operator types: a whole number with a unit (`90s`, `15m`, `12h`, `30d`, `2w`),
 * or bare seconds. Undefined when it is not one.
 */
export function parseDurationMs(text: string): number | undefined {
  const m = /^(\d{1,9})\s*([smhdw]?)$/.exec(text.trim());
  if (!m) return undefined;
  const ms = Number(m[1]) * UNITS[m[2] || 's']!;
  return ms > 0 ? ms : undefined;
}
