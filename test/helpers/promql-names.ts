/** Words of PromQL that are not metric names: operators and modifiers. */
const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'by', 'without', 'on', 'ignoring']);

/**
 * The metric names a PromQL expression reads. Quoted strings, label matchers, range and subquery
 * brackets and grouping label lists are cut first; what is left that looks like an identifier and
 * is not called as a function is a metric name. Enough for the expressions we ship, not a parser.
 */
export function promqlMetricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = new Set<string>();
  for (const m of bare.matchAll(/(?<![\w.$])([a-zA-Z_:][\w:]*)(\s*\()?/g)) {
    if (m[2] || KEYWORDS.has(m[1]!) || /^(?:inf|nan)$/i.test(m[1]!)) continue;
    names.add(m[1]!);
  }
  return [...names];
}
