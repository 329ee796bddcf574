import { readdirSync } from 'node:fs';
import { pidsInSession, processGroupOf, readProcFile, stopProcesses } from '../../../util/proc-tree.js';

/** Is any process of this group still alive? (EPERM means it exists but is not ours to signal.) */
export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** SIGTERM the whole group, wait up to `graceMs`, then SIGKILL what is left. */
export async function stopGroup(pgid: number, graceMs = 5_000): Promise<void> {
  if (!signalGroup(pgid, 'SIGTERM')) return;
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    if (!groupAlive(pgid)) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  signalGroup(pgid, 'SIGKILL');
}

function signalGroup(pgid: number, sig: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, sig);
    return true;
  } catch {
    return false;
  }
}

/**
 * Host-local proof that a pid is the agent we launched: its environment names the agent id.
 * Guards against a recycled pid after a restart.
 */
export function processBelongsToAgent(pid: number, agentId: string): boolean {
  try {
    const environ = readProcFile(`/proc/${pid}/environ`, 'utf8');
    return environ.split('\0').includes(`KICI_AGENT_ID=${agentId}`);
  } catch {
    return false;
  }
}

/**
 * Find the agent process by its environment when no pid was recorded (a crash can land between
 * the spawn and the write of its pid). The agent is its process group's leader.
 */
export async function findAgentPid(agentId: string): Promise<number | undefined> {
  let names: string[];
  try {
    names = readdirSync('/proc');
  } catch {
    return undefined;
  }
  let n = 0;
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    if (++n % 256 === 0) await new Promise((r) => setImmediate(r));
    const pid = Number(name);
    // A leader that raced with its exit reads no group and is passed over.
    if (processBelongsToAgent(pid, agentId) && processGroupOf(pid) === pid) return pid;
  }
  return undefined;
}

/**
 * Tear down an agent and everything it started: its process group first (the agent cancels its job
 * and cleans up after it on SIGTERM), then what left the group but not the session, then any process
 * still carrying the agent's id in its environment, which catches daemons that left the session too
 * (setsid, double fork). `bornFromTicks`, the agent process's start time where it is known, spares
 * that last scan reading the environment of every older process on the host: all that carries the
 * id descends from the agent, so none is older.
 */
export async function stopAgentTree(
  agentId: string,
  pgid: number | undefined,
  graceMs = 5_000,
  bornFromTicks?: number,
): Promise<number> {
  if (pgid !== undefined) {
    await stopGroup(pgid, graceMs);
    for (const pid of await pidsInSession(pgid)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
  return stopProcesses({ env: `KICI_AGENT_ID=${agentId}`, bornFromTicks }, Math.min(graceMs, 2_000));
}
