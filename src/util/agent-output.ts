import { formatText, levelName } from './log-format.js';
import type { Logger } from './logger.js';

/** Fields of the agent's record that our own logger sets again (pino would write them twice). */
const OURS = new Set(['level', 'time', 'pid', 'hostname', 'service', 'msg']);

/**
 * One line of an agent's stdout or stderr into our log, as `agent output`. An agent writes the
 * shared JSON shape: its message and fields become fields of our record (`agentMsg`, `agentTime`
 * and the rest), at the agent's level, so a log pipeline can filter on them without parsing a
 * string inside a string. Any other line (a crash trace, a shell error) is kept whole in `line`.
 */
export function logAgentLine(log: Logger, fields: Record<string, unknown>, line: string): void {
  const r = agentRecord(line);
  if (!r) {
    log.info({ ...fields, line }, 'agent output');
    return;
  }
  const out: Record<string, unknown> = { ...fields };
  for (const [k, v] of Object.entries(r)) if (!OURS.has(k) && !(k in out)) out[k] = v;
  if (r.msg !== undefined) out.agentMsg = r.msg;
  if (r.time !== undefined) out.agentTime = r.time;
  log[levelName(r.level) ?? 'info'](out, 'agent output');
}

/** The agent's record when `line` is one JSON object, else undefined. */
function agentRecord(line: string): Record<string, unknown> | undefined {
  try {
    const rec: unknown = line.startsWith('{') ? JSON.parse(line) : undefined;
    return rec && typeof rec === 'object' && !Array.isArray(rec)
      ? (rec as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * One line of an agent's output for its job's log, which people read: a record in the shared JSON
 * shape as `[stdout] INFO  kici-agent: message key=value …` (the job log has its own time stamp),
 * any other line as it came.
 */
export function agentLineForJob(stream: string, line: string): string {
  const r = agentRecord(line);
  return `[${stream}] ${r ? formatText({ ...r, time: undefined }).trimStart() : line}`;
}
