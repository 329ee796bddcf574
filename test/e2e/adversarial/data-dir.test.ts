import { randomBytes } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, lstat, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { chownTree } from '../../helpers/as-user.js';
import { freshDataDir } from '../../helpers/data-dir.js';
import {
  NODE,
  ORCH_BIN,
  alive,
  bareMetalConfig,
  eventually,
  startTestOrchestrator,
  writeConfig,
} from '../../helpers/orchestrator.js';

/**
 * The data dir: private modes, a clear error when it is read-only, readiness that notices a store
 * that cannot write, and one server per dir.
 */

const NOBODY = 65534;
const started: ChildProcess[] = [];
const dirs: string[] = [];

afterEach(async () => {
  for (const c of started.splice(0)) {
    if (c.exitCode === null && c.signalCode === null && c.pid && alive(c.pid)) {
      c.kill('SIGKILL');
      await new Promise((r) => c.once('close', r));
    }
  }
});
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

interface Serve {
  child: ChildProcess;
  url: Promise<string>;
  exited: Promise<{ code: number | null; stdout: string; stderr: string }>;
  output(): string;
}

/** `kici-orchestrator serve` as a real process, optionally as the unprivileged user `nobody`. */
function serve(args: string[], opts: { asNobody?: boolean } = {}): Serve {
  // A server run as nobody cannot write the tests' shared token file: it gets its own, outside its data dir.
  const tokenDir = join(tmpdir(), `kici-nobody-etc-${randomBytes(4).toString('hex')}`);
  if (opts.asNobody) dirs.push(tokenDir);
  const tokenArgs = opts.asNobody ? ['--admin-token-file', join(tokenDir, 'admin-token')] : [];
  const cmd = [NODE, ORCH_BIN, 'serve', '--listen', '127.0.0.1:0', ...tokenArgs, ...args];
  const child = opts.asNobody
    ? spawn('setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', ...cmd], {
        stdio: ['ignore', 'pipe', 'pipe'],
      })
    : spawn(cmd[0]!, cmd.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  started.push(child);
  let stdout = '';
  let stderr = '';
  let onUrl: (u: string) => void;
  const url = new Promise<string>((r) => (onUrl = r));
  child.stdout!.on('data', (d) => {
    stdout += String(d);
    const m = /ready on (http:\/\/[0-9.]+:\d+)/.exec(stdout);
    if (m) onUrl(m[1]!);
  });
  child.stderr!.on('data', (d) => (stderr += String(d)));
  const exited = new Promise<{ code: number | null; stdout: string; stderr: string }>((r) =>
    child.on('close', (code) => r({ code, stdout, stderr })),
  );
  return { child, url, exited, output: () => stdout + stderr };
}

async function withTimeout<T>(p: Promise<T>, ms: number, what: string, s?: Serve): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} within ${ms} ms\n${s?.output() ?? ''}`)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * SIGTERM a ready server and expect a clean exit. A round trip first: `serve` logs "ready" just
 * before it installs its signal handlers.
 */
async function stopServe(s: Serve): Promise<void> {
  await fetch(`${await s.url}/healthz`);
  s.child.kill('SIGTERM');
  expect((await withTimeout(s.exited, 60_000, 'serve did not stop', s)).code).toBe(0);
}

async function loosePaths(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    const st = await lstat(p);
    if (st.mode & 0o077) out.push(`${p} ${(st.mode & 0o777).toString(8)}`);
    if (e.isDirectory()) out.push(...(await loosePaths(p)));
  }
  return out;
}

describe('the data dir is private', () => {
  it('a new data dir is 0700 and nothing in it is group or world accessible; steps keep umask 022', async () => {
    const parent = await mkdtemp(join(tmpdir(), 'kici-mode-'));
    dirs.push(parent);
    const dataDir = join(parent, 'data');
    const t = await startTestOrchestrator({ dataDir, config: bareMetalConfig() });
    try {
      const res = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
        jobs: { mask: { runsOn: ['linux', 'small'], steps: [{ run: 'umask' }] } },
      });
      const job = await t.waitForJob(res.body.jobs[0]!.id);
      expect(job.state).toBe('succeeded');
      const logs = await t.api<{ lines: { stream: string; line: string }[] }>(
        'GET',
        `/api/v1/jobs/${job.id}/logs`,
      );
      expect(logs.body.lines.filter((l) => l.stream === 'stdout').map((l) => l.line)).toEqual(['0022']);
      expect((await stat(dataDir)).mode & 0o777).toBe(0o700);
      expect(await loosePaths(dataDir)).toEqual([]);
    } finally {
      await t.stop();
    }
  });

  it('an existing data dir with loose modes is tightened at start', async () => {
    const dataDir = await freshDataDir();
    dirs.push(dataDir);
    await chmod(dataDir, 0o755);
    await writeFile(join(dataDir, 'pg', 'loose-file'), 'x', { mode: 0o666 });
    await chmod(join(dataDir, 'pg', 'loose-file'), 0o666);
    const t = await startTestOrchestrator({ dataDir });
    await t.stop();
    expect((await stat(dataDir)).mode & 0o777).toBe(0o700);
    expect(await loosePaths(dataDir)).toEqual([]);
  });
});

describe('a read-only data dir is named, with the permission', () => {
  it('serve as an unprivileged user on a read-only existing data dir exits 1 naming the path', async () => {
    const dataDir = await freshDataDir();
    dirs.push(dataDir);
    await chownTree(dataDir, NOBODY);
    await chmod(dataDir, 0o500);
    await chmod(join(dataDir, 'pg'), 0o500);
    const s = serve(['--data-dir', dataDir], { asNobody: true });
    const res = await withTimeout(s.exited, 30_000, 'serve did not exit', s);
    expect(res.code).toBe(1);
    expect(res.stderr).toContain(dataDir);
    expect(res.stderr).toContain('permission denied');
    expect(res.stderr).not.toContain('PGlite failed to initialize');
    expect(res.stderr).not.toMatch(/\n\s+at /); // no stack trace
  });
});

describe('/readyz reflects a store that cannot write', () => {
  it('a data dir made read-only under a running server turns /readyz to 503 store-unwritable, and back', async () => {
    const dataDir = await freshDataDir();
    dirs.push(dataDir);
    await chownTree(dataDir, NOBODY);
    const s = serve(['--data-dir', dataDir], { asNobody: true });
    const url = await withTimeout(s.url, 30_000, 'serve was not ready', s);
    expect((await fetch(`${url}/readyz`)).status).toBe(200);
    await chmod(join(dataDir, 'pg'), 0o500);
    await chmod(dataDir, 0o500);
    const down = await eventually(
      async () => {
        const r = await fetch(`${url}/readyz`);
        return r.status === 503 ? ((await r.json()) as { status: string; problem: string }) : undefined;
      },
      10_000,
      '/readyz to report 503',
    );
    expect(down.status).toBe('store-unwritable');
    expect(down.problem).toContain(dataDir);
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    await chmod(dataDir, 0o700);
    await chmod(join(dataDir, 'pg'), 0o700);
    await eventually(async () => (await fetch(`${url}/readyz`)).status === 200, 10_000, '/readyz to recover');
    // The outage was logged.
    expect(s.output()).toContain('the store cannot write');
    await stopServe(s);
  });
});

describe('one server per data dir', () => {
  it('a second serve on the same data dir exits 1 naming the holder; the first keeps its jobs', async () => {
    const dataDir = await freshDataDir();
    dirs.push(dataDir);
    const config = await writeConfig(bareMetalConfig());
    dirs.push(join(config, '..'));
    const first = serve(['--data-dir', dataDir, '--config', config]);
    const url = await withTimeout(first.url, 30_000, 'first serve was not ready', first);
    const token = (await readFile(process.env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim();
    const api = async <T>(method: string, path: string, body?: unknown) => {
      const r = await fetch(`${url}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      return (await r.json()) as T;
    };
    // The jobs hold until the test opens their gate, after the second serve has come and gone.
    const gate = join(config, '..', 'gate');
    const run = await api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: Object.fromEntries(
        [1, 2, 3].map((i) => [
          `j${i}`,
          {
            runsOn: ['linux', 'small'],
            steps: [{ run: `until [ -e '${gate}' ]; do sleep 0.1; done; echo done ${i}` }],
          },
        ]),
      ),
    });
    const ids = run.jobs.map((j) => j.id);
    await eventually(
      async () => {
        const states = await Promise.all(
          ids.map((id) => api<{ state: string }>('GET', `/api/v1/jobs/${id}`)),
        );
        return states.every((s) => s.state === 'running');
      },
      30_000,
      'three running jobs',
    );

    const second = serve(['--data-dir', dataDir, '--config', config]);
    const res = await withTimeout(second.exited, 30_000, 'the second serve did not exit', second);
    expect(res.code).toBe(1);
    expect(res.stderr).toContain(`pid ${first.child.pid}`);
    expect(res.stderr).toContain('stop it, or use another --data-dir');
    expect(res.stdout).not.toContain('ready on');
    await writeFile(gate, '');

    // None of the first server's jobs was touched: all finish normally.
    for (const id of ids) {
      const job = await eventually(
        async () => {
          const j = await api<{ state: string; reason: string | null }>('GET', `/api/v1/jobs/${id}`);
          return ['succeeded', 'failed', 'cancelled', 'timed-out'].includes(j.state) ? j : undefined;
        },
        30_000,
        `job ${id} to finish`,
      );
      expect(job).toMatchObject({ state: 'succeeded', reason: null });
    }
    const lock = join(dataDir, 'orchestrator.lock');
    expect(JSON.parse(await readFile(lock, 'utf8')).pid).toBe(first.child.pid);
    await stopServe(first);
    // Released on stop: the next server starts at once.
    await expect(stat(lock)).rejects.toThrow(/ENOENT/);
    const third = serve(['--data-dir', dataDir]);
    await withTimeout(third.url, 30_000, 'a third serve was not ready', third);
    await stopServe(third);
  });

  it('a stale lock (its process is gone) is taken over', async () => {
    const dataDir = await freshDataDir();
    dirs.push(dataDir);
    const dead = spawn('true');
    await new Promise((r) => dead.once('close', r));
    await writeFile(
      join(dataDir, 'orchestrator.lock'),
      JSON.stringify({ pid: dead.pid, startTime: '1', hostname: (await import('node:os')).hostname() }),
    );
    const s = serve(['--data-dir', dataDir]);
    await withTimeout(s.url, 30_000, 'serve over a stale lock was not ready', s);
    expect(JSON.parse(await readFile(join(dataDir, 'orchestrator.lock'), 'utf8')).pid).toBe(s.child.pid);
    await stopServe(s);
  });
});
