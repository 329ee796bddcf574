/**
 * The one log-line shape of the orchestrator and its agents: pino's JSON (numeric `level`, `time`
 * in epoch ms, `service`, then fields and `msg`), and a text rendering of the same
 * record for people (`--log-format text` or KICI_LOG_FORMAT=text). Free of dependencies so the
 * agent can use it without loading pino.
 */
export type LogFormat = 'json' | 'text';

export const LEVELS = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60 } as const;
export type LevelName = keyof typeof LEVELS;

const NAMES = new Map<number, LevelName>(
  Object.entries(LEVELS).map(([k, v]) => [v, k as LevelName] as const),
);

/** The level's name for a pino number, or undefined for anything else. */
export function levelName(level: unknown): LevelName | undefined {
  return typeof level === 'number' ? NAMES.get(level) : undefined;
}

/** `--log-format` or KICI_LOG_FORMAT; a clear error naming both for anything but json or text. */
export function parseLogFormat(value: string | undefined): LogFormat {
  if (value === undefined || value === '' || value === 'json') return 'json';
  if (value === 'text') return 'text';
  throw new Error(`--log-format (or KICI_LOG_FORMAT): expected "json" or "text", got "${value}"`);
}

/** One record in the shared shape. */
export function logRecord(
  service: string,
  level: LevelName,
  msg: string,
  fields: Record<string, unknown> = {},
  now = Date.now(),
): Record<string, unknown> {
  return { level: LEVELS[level], time: now, service, ...fields, msg };
}

const HIDDEN = new Set(['level', 'time', 'pid', 'hostname', 'service', 'msg']);

/** `2026-01-02T03:04:05.678Z INFO  kici-agent: registered as a1 agentId=a1`: one line, no newline. */
export function formatText(rec: Record<string, unknown>): string {
  const time = typeof rec.time === 'number' ? new Date(rec.time).toISOString() : String(rec.time ?? '');
  const level = (levelName(rec.level) ?? String(rec.level ?? 'info')).toUpperCase().padEnd(5);
  const msg = String(rec.msg ?? '').replace(/[\r\n]/g, (c) => (c === '\n' ? '\\n' : '\\r'));
  const parts = [time, level, `${String(rec.service ?? '-')}:`, msg];
  for (const [k, v] of Object.entries(rec)) {
    if (HIDDEN.has(k) || v === undefined) continue;
    const s = typeof v === 'string' ? v : JSON.stringify(v);
    parts.push(`${k}=${/[\s"=]/.test(s) || s === '' ? JSON.stringify(s) : s}`);
  }
  return parts.join(' ');
}

/** A JSON log line rendered as text; a line that is not a JSON object passes through unchanged. */
export function jsonLineToText(line: string): string {
  try {
    const rec: unknown = JSON.parse(line);
    if (rec && typeof rec === 'object' && !Array.isArray(rec))
      return formatText(rec as Record<string, unknown>);
  } catch {
    // not ours: shown as it came
  }
  return line;
}
