import { agentLineForJob, logAgentLine } from '../../../util/agent-output.js';
import { onLines } from '../../../util/lines.js';
import type { Logger } from '../../../util/logger.js';
import type { SpawnContext } from '../../types.js';
import type { LineSource } from '../log-capture.js';
import type { AgentChild } from './spawner/agent-child.js';

/** Lines of an agent process's output kept for its failure message and getLogCapture. */
export const TAIL_LINES = 50;

/** The last lines one agent process wrote, oldest first; older ones are dropped as new ones come. */
export class OutputTail implements LineSource {
  private readonly lines: string[] = [];

  push(line: string): void {
    this.lines.push(line);
    if (this.lines.length > TAIL_LINES) this.lines.shift();
  }

  /** The last `n` lines, as a copy. */
  last(n: number): string[] {
    return this.lines.slice(-n);
  }

  kept(): readonly string[] {
    return this.last(TAIL_LINES);
  }
}

/** The agent's own output goes to our log at info and, as system lines, to its bound job's log. */
export function captureOutput(
  log: Logger,
  agentId: string,
  tail: OutputTail,
  child: AgentChild,
  onEvent: SpawnContext['onEvent'],
): void {
  const agentLog = log.child({ agentId, logsSource: 'bare-metal' });
  for (const [name, stream] of [
    ['stdout', child.stdout],
    ['stderr', child.stderr],
  ] as const) {
    onLines(stream, (line) => {
      tail.push(line);
      logAgentLine(agentLog, { stream: name }, line);
      onEvent('agent.output', agentLineForJob(name, line));
    });
  }
}

/** Where the agent stands when its process exits. */
export interface ExitState {
  readonly registered: boolean;
  readonly destroying: boolean;
  readonly tail: OutputTail;
}

/** The process exited before the agent registered: say so on the waiting job, with its last lines. */
export function reportEarlyExit(
  req: Pick<SpawnContext, 'onEvent'>,
  t: ExitState,
  code: number | null,
  signal: NodeJS.Signals | null,
): void {
  // Tracking stays until the manager's destroy(): that is what removes the cgroup and what the
  // active count must include until then.
  if (t.registered || t.destroying) return;
  const how = signal ? `signal ${signal}` : `code ${code}`;
  const tail = t.tail.last(10).join('\n');
  req.onEvent(
    'scaler.failed',
    `agent process exited with ${how} before it registered${tail ? `\n---\n${tail}` : ''}`,
  );
}
