import { readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { AGENT_BIN, alive, eventually, ORCH_BIN, runNode } from './orchestrator.js';
import { pidsWithEnv } from './processes.js';

/**
 * A port for a server the test starts (and may restart on the same port). Taken below the kernel's
 * ephemeral range, which is where every port-0 listener and outgoing connection of the run gets
 * its port: between this check and the child's bind, no other test can be handed the same one.
 */
export async function freePort(): Promise<number> {
  const [low] = (await readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').catch(() => '32768'))
    .trim()
    .split(/\s+/)
    .map(Number);
  const below = Math.max(2_000, (low ?? 32_768) - 10_000);
  for (let tries = 0; tries < 50; tries++) {
    const port = below + Math.floor(Math.random() * 10_000);
    if (await bindable(port)) return port;
  }
  throw new Error('no free port found below the ephemeral range');
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

export type ServeProcess = ReturnType<typeof runNode> & { pid: number; url: string };

/**
 * `kici-orchestrator serve` as a child process on a fixed port, resolved once it logged its ready
 * line. A process that exits before it is ready fails with its output.
 */
export async function startServe(opts: {
  config: string;
  port: number;
  dataDir: string;
  env?: NodeJS.ProcessEnv;
  readyTimeoutMs?: number;
  /** Listen address (default 127.0.0.1); container agents need one they can reach. */
  host?: string;
}): Promise<ServeProcess> {
  const proc = runNode(
    [
      ORCH_BIN,
      'serve',
      '--config',
      opts.config,
      '--listen',
      `${opts.host ?? '127.0.0.1'}:${opts.port}`,
      '--data-dir',
      opts.dataDir,
    ],
    { KICI_LOG_LEVEL: 'info', ...opts.env },
  );
  const pid = proc.child.pid!;
  // A serve that never got ready is not left behind for the next test to trip over.
  const ready = await eventually(
    () => {
      const m = /"url":"(http:[^"]+)"/.exec(proc.output().stdout);
      if (m) return m;
      if (proc.child.exitCode !== null || proc.child.signalCode !== null) {
        const { stdout, stderr } = proc.output();
        throw new Error(
          `serve exited before it was ready (${proc.child.exitCode ?? proc.child.signalCode})\n${tail(stdout)}\n${tail(stderr)}`,
        );
      }
      return undefined;
    },
    // A first start initialises the embedded database, seconds of CPU: beside the system tier's
    // guests and engines on a 2-core host it has taken more than a minute.
    opts.readyTimeoutMs ?? 180_000,
    `serve on port ${opts.port} to log its ready line`,
  ).catch(async (err: unknown) => {
    if (proc.child.exitCode === null && proc.child.signalCode === null) {
      proc.child.kill('SIGKILL');
      await proc.exited;
    }
    throw err;
  });
  return Object.assign(proc, { pid, url: ready[1]! });
}

/** The last lines of a process's output, for failure messages. */
export function tail(text: string, lines = 40): string {
  return text.split('\n').slice(-lines).join('\n');
}

/** The environment entry every agent (and every step it runs) of the orchestrator on `port` carries. */
export function agentEnvNeedle(port: number): string {
  return `KICI_ORCHESTRATOR_URL=ws://127.0.0.1:${port}/ws`;
}

/** Which of these pids are agent processes (the rest are the steps they run)? */
export async function agentProcesses(pids: number[]): Promise<number[]> {
  const out: number[] = [];
  for (const pid of pids) {
    try {
      if ((await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0').includes(AGENT_BIN)) out.push(pid);
    } catch {
      // gone
    }
  }
  return out;
}

/** SIGKILL the given processes (by pid; their own groups too when they lead one). */
export function killPids(pids: Iterable<number>): void {
  for (const pid of pids) {
    for (const target of [-pid, pid]) {
      try {
        process.kill(target, 'SIGKILL');
      } catch {
        // not a group leader, or already gone
      }
    }
  }
}

/** Clean-up backstop: kill every live process that carries this orchestrator's agent URL. */
export async function killAgentsOf(port: number): Promise<number[]> {
  const pids = await pidsWithEnv(agentEnvNeedle(port));
  killPids(pids);
  return pids;
}

/** SIGKILL a serve process by pid (if still running) and wait until it is gone. */
export async function killServe(p: ServeProcess | undefined): Promise<void> {
  if (!p) return;
  if (p.child.exitCode === null && p.child.signalCode === null && alive(p.pid)) {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  await p.exited;
}

/** Admin API client for a serve process. */
export function adminApi(url: string, token: string) {
  return async <T = unknown>(
    method: string,
    path: string,
    body?: unknown,
  ): Promise<{ status: number; body: T }> => {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(10_000),
    });
    return { status: res.status, body: (await res.json()) as T };
  };
}
