import { spawn } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { TOKEN_FD } from '../env.js';

/** A started agent process, whoever its parent is: what the backend reads of it. */
export interface AgentChild {
  readonly pid: number;
  readonly stdout: Readable;
  readonly stderr: Readable;
  /** After both output streams ended. */
  onClose(cb: (code: number | null, signal: NodeJS.Signals | null) => void): void;
  /** Its pipes no longer keep the orchestrator's event loop alive. */
  unref(): void;
  /**
   * A provisional start (see AgentSpawner.spawn) that its launcher need no longer undo: its record
   * is written, or the orchestrator undid it itself. Absent where the start was never provisional.
   */
  settle?(): void;
}

/** What an agent is started with: the command, its whole environment, and its token (fd 3). */
export interface AgentLaunch {
  file: string;
  args: string[];
  env: Record<string, string>;
  token: string;
  /** Started under this uid and gid, switched to between the fork and the exec (launch.ts). */
  uid?: number | undefined;
  gid?: number | undefined;
}

/**
 * Start the agent as the orchestrator's own child (the path when no spawner is ready). The token
 * goes down descriptor TOKEN_FD, which the agent reads to its end and closes: never the
 * environment, which stays readable in /proc for the process's whole life.
 */
export async function spawnDirect(l: AgentLaunch): Promise<AgentChild> {
  const child = spawn(l.file, l.args, {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
    env: l.env,
    ...(l.uid !== undefined && l.gid !== undefined ? { uid: l.uid, gid: l.gid } : {}),
  });
  await new Promise<void>((ok, failed) => {
    child.once('spawn', ok);
    child.once('error', failed);
  });
  const handoff = child.stdio[TOKEN_FD] as Writable | null;
  // An agent that dies before reading it breaks the pipe; its exit is reported on its own.
  handoff?.on('error', () => {});
  handoff?.end(`${l.token}\n`);
  return {
    pid: child.pid!,
    stdout: child.stdout!,
    stderr: child.stderr!,
    onClose: (cb) => void child.once('close', cb),
    unref: () => child.unref(),
  };
}
