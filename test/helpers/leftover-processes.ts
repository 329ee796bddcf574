import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { pidsWithEnv } from './processes.js';

/**
 * Every process a test run starts carries one marker in its environment: test workers inherit it
 * from the runner, servers and agents from the tests, and bare-metal agents (whose environment is
 * built from scratch) get it through the orchestrator's KICI_AGENT_ENV_ forwarding. At the end of
 * the run, a live process with the marker is one the suite failed to clean up.
 */
export const MARKER = 'KICI_TEST_RUN';

/** Set the marker once per runner process (every project's global setup shares it). */
export function markTestRun(): string {
  const id = (process.env[MARKER] ??= randomBytes(6).toString('hex'));
  process.env[`KICI_AGENT_ENV_${MARKER}`] = id;
  return id;
}

async function cmdline(pid: number): Promise<string | undefined> {
  try {
    return (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0').join(' ').trim();
  } catch {
    return undefined; // gone
  }
}

/** Live marked processes other than the runner and its own workers, with their command lines. */
export async function leftoverProcesses(id: string): Promise<{ pid: number; cmd: string }[]> {
  const out: { pid: number; cmd: string }[] = [];
  for (const pid of await pidsWithEnv(`${MARKER}=${id}`)) {
    if (pid === process.pid) continue;
    const cmd = await cmdline(pid);
    // Zombies have an empty command line; the runner's own workers live in vitest's package.
    if (!cmd || /[/\\]vitest[/\\]/.test(cmd)) continue;
    out.push({ pid, cmd });
  }
  return out;
}

/**
 * Give stragglers (agents finishing their exit) a few seconds, then kill what is left by pid and
 * throw, so the run fails and names each process.
 */
export async function checkNoLeftovers(id: string, graceMs = 5_000): Promise<void> {
  const until = Date.now() + graceMs;
  let left = await leftoverProcesses(id);
  while (left.length && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 250));
    left = await leftoverProcesses(id);
  }
  if (!left.length) return;
  for (const { pid } of left) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  const list = left.map((p) => `  pid ${p.pid}: ${p.cmd.slice(0, 300)}`).join('\n');
  // The runner reports an error thrown at teardown but keeps its exit code: set it as well.
  process.exitCode = 1;
  throw new Error(`the test run left ${left.length} process(es) alive (now killed):\n${list}`);
}
