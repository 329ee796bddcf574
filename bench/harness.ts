/**
 * Real orchestrator servers and real agents as child processes, from any build (a `root` with
 * dist/ and node_modules/), for the latency and scale benches. Everything started here is killed
 * by `stopAll()`.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const TICK_MS = 10; // USER_HZ is 100 on Linux
const children: ChildProcess[] = [];
const dirs: string[] = [];
const exec = promisify(execFile);

export interface Server {
  url: string;
  ws: string;
  pid: number;
  token: string;
  dir: string;
  child: ChildProcess;
  root: string;
}

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const p = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return p;
}

export async function startServer(
  root: string,
  opts: {
    dbUrl?: string;
    instanceId?: string;
    nodeArgs?: string[];
    /** Start again on a data dir an earlier server of this run left (a restart). */
    dir?: string;
    readyWithinMs?: number;
  } = {},
): Promise<Server> {
  const dir = opts.dir ?? (await mkdtemp(join(tmpdir(), 'kici-bench-')));
  if (!opts.dir) dirs.push(dir);
  const port = await freePort();
  const args = [join(root, 'dist/cli/orchestrator.js'), 'serve', '--listen', `127.0.0.1:${port}`];
  args.push('--data-dir', dir);
  if (opts.dbUrl) args.push('--database-url', opts.dbUrl, '--instance-id', opts.instanceId ?? 'bench');
  // Newer builds keep the admin token outside the data dir (where told); older ones inside it.
  const tokenFile = `${dir}.admin-token`;
  if (!opts.dir) dirs.push(tokenFile);
  const child = spawn(join(root, 'node_modules/.bin/node'), [...(opts.nodeArgs ?? []), ...args], {
    env: { ...process.env, KICI_LOG_LEVEL: 'warn', KICI_ADMIN_TOKEN_FILE: tokenFile },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => void (stderr = (stderr + String(d)).slice(-2000)));
  children.push(child);
  // A server that dies on its own (out of memory, say) says why, not only the next request's reset.
  child.once('exit', (code, signal) => {
    if (signal !== 'SIGKILL' && signal !== 'SIGTERM' && code !== 0)
      process.stderr.write(`server ${dir} exited (${signal ?? code}):\n${stderr}\n`);
  });
  const url = `http://127.0.0.1:${port}`;
  const until = Date.now() + (opts.readyWithinMs ?? 60_000);
  while (
    !(await fetch(`${url}/readyz`).then(
      (r) => r.ok,
      () => false,
    ))
  ) {
    if (Date.now() > until || child.exitCode !== null) throw new Error(`server from ${root} did not start`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const token = (
    await readFile(tokenFile, 'utf8').catch(() => readFile(join(dir, 'admin-token'), 'utf8'))
  ).trim();
  return { url, ws: `ws://127.0.0.1:${port}/ws`, pid: child.pid!, token, dir, child, root };
}

export async function api<T>(s: Server, method: string, path: string, body?: unknown): Promise<T> {
  const r = await fetch(`${s.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${s.token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
  return (await r.json()) as T;
}

export function mintToken(s: Server, agentId: string, labels: string[]): Promise<{ token: string }> {
  return api(s, 'POST', '/api/v1/agents/tokens', { labels, agentId });
}

/** A real `kici-agent` process of the server's build; resolves once the server lists it. */
export async function startAgent(
  s: Server,
  id: string,
  labels: string[],
  root = s.root,
): Promise<ChildProcess> {
  const tok = await mintToken(s, id, labels);
  const child = spawn(join(root, 'node_modules/.bin/node'), [join(root, 'dist/cli/agent.js')], {
    env: {
      ...process.env,
      KICI_ORCHESTRATOR_URL: s.ws,
      KICI_AGENT_ID: id,
      KICI_AGENT_TOKEN: tok.token,
      KICI_LABELS: labels.join(','),
    },
    stdio: 'ignore',
  });
  children.push(child);
  const until = Date.now() + 30_000;
  for (;;) {
    const { agents } = await api<{ agents: { id: string; state?: string; busyJobId?: string | null }[] }>(
      s,
      'GET',
      '/api/v1/agents',
    );
    // Older builds list no state, only the job an agent is busy with.
    const idle = (a: { state?: string; busyJobId?: string | null }) =>
      a.state === undefined ? !a.busyJobId : a.state === 'idle';
    if (agents.some((a) => a.id === id && idle(a))) return child;
    if (Date.now() > until) throw new Error(`agent ${id} did not register`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** utime + stime of a process, in ms (from /proc/<pid>/stat). */
export async function cpuMs(pid: number): Promise<number> {
  const f = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) * TICK_MS;
}

/** Resident set size of a process, in bytes. */
export async function rssBytes(pid: number): Promise<number> {
  const st = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(st)?.[1] ?? NaN) * 1024;
}

/** A graceful stop (SIGTERM), as an operator's restart does; SIGKILL after `withinMs`. */
export async function stopServer(s: Server, withinMs = 120_000): Promise<void> {
  if (s.child.exitCode !== null || s.child.signalCode !== null) return;
  const exited = new Promise((r) => s.child.once('exit', r));
  s.child.kill('SIGTERM');
  const timer = setTimeout(() => s.child.kill('SIGKILL'), withinMs);
  await exited;
  clearTimeout(timer);
}

export async function stopAll(): Promise<void> {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await Promise.all(
    children
      .filter((c) => c.exitCode === null && c.signalCode === null)
      .map((c) => new Promise((r) => c.once('exit', r))),
  );
  children.length = 0;
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
}

/**
 * A build of another commit, for side-by-side figures: a detached worktree under /tmp, with its own
 * `npm ci` and `npm run build` the first time (reused afterwards).
 */
export async function buildOf(repo: string, commit: string): Promise<string> {
  const dir = join(tmpdir(), `kici-bench-${commit}`);
  if (existsSync(join(dir, 'dist/cli/orchestrator.js'))) return dir;
  if (!existsSync(dir)) await exec('git', ['-C', repo, 'worktree', 'add', '--detach', dir, commit]);
  process.stdout.write(`  building ${commit} in ${dir} (npm ci, npm run build)…\n`);
  await exec('npm', ['ci', '--no-audit', '--no-fund'], { cwd: dir, maxBuffer: 64 << 20 });
  await exec('npm', ['run', 'build'], { cwd: dir, maxBuffer: 64 << 20 });
  return dir;
}
