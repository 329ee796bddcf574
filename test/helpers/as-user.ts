import { spawn } from 'node:child_process';
import { chmod, chown, cp, lchown, mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { onPath } from '../../src/scaler/backends/bare-metal/host-probe.js';
import { freePort } from './crash.js';
import { NODE, ORCH_BIN, eventually, type JobBody, type TestOrchestrator } from './orchestrator.js';

/**
 * An orchestrator CLI run as an unprivileged uid by a root test: the host a non-root operator has,
 * where bare-metal jobs get the bubblewrap sandbox by default.
 */

/** No passwd entry needed: setpriv takes a bare uid. Outside the per-agent range (61000+). */
export const ORCH_UID = 60_990;

/**
 * The tree under `dir` given to `uid`. A link is changed itself, never what it points at: a test's
 * PATH links to the repository's node binary, and giving that away made every later sealed copy
 * of Node another uid's.
 */
export async function chownTree(dir: string, uid: number): Promise<void> {
  await chown(dir, uid, uid);
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) await chownTree(p, uid);
    else await lchown(p, uid, uid);
  }
}

/** The orchestrator CLI as `uid`, with a clean environment (no test token file, no root HOME). */
export async function startAs(uid: number, home: string, args: string[], env: Record<string, string>) {
  // Found on the test's own PATH: the child's may be made to lack it.
  const setpriv = onPath('setpriv', process.env.PATH) ?? 'setpriv';
  const c = spawn(setpriv, [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--', NODE, ...args], {
    env: { HOME: home, KICI_LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  c.stdout!.on('data', (d) => (out += String(d)));
  c.stderr!.on('data', (d) => (out += String(d)));
  const exited = new Promise<{ code: number | null }>((r, fail) => {
    c.once('exit', (code) => r({ code }));
    c.once('error', fail);
  });
  return { child: c, output: () => out, exited };
}

const FINAL = ['succeeded', 'failed', 'cancelled', 'timed-out', 'no-backend'];

/** What a test drives an orchestrator run as another uid with. */
export interface UserOrchestrator {
  url: string;
  wsUrl: string;
  home: string;
  dataDir: string;
  /** Its default admin token file, in its home. */
  tokenFile: string;
  api: TestOrchestrator['api'];
  waitForJob(jobId: string, states?: string[], timeoutMs?: number): Promise<JobBody>;
  /** Everything it printed so far (its JSON log lines). */
  output(): string;
  stop(): Promise<void>;
}

/**
 * `orchestrator serve` as ORCH_UID under `base` (which the caller removes), with a copy of the
 * template data dir and `config`; ready when /readyz answers.
 */
export async function startOrchestratorAs(
  base: string,
  templateDataDir: string,
  config: unknown,
): Promise<UserOrchestrator> {
  await chmod(base, 0o755);
  const home = join(base, 'home');
  const dataDir = join(base, 'data');
  await mkdir(home, { mode: 0o700 });
  await cp(join(templateDataDir, 'pg'), join(dataDir, 'pg'), { recursive: true });
  const cfg = join(base, 'scalers.yaml');
  await writeFile(cfg, JSON.stringify(config));
  await chownTree(base, ORCH_UID);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const proc = await startAs(
    ORCH_UID,
    home,
    [ORCH_BIN, 'serve', '--listen', `127.0.0.1:${port}`, '--data-dir', dataDir, '--config', cfg],
    { PATH: `${dirname(NODE)}:/usr/bin:/bin` },
  );
  const stop = async () => {
    if (proc.child.exitCode !== null || proc.child.signalCode !== null) return;
    proc.child.kill('SIGTERM');
    await proc.exited;
  };
  try {
    await eventually(
      () =>
        fetch(`${url}/readyz`).then(
          (r) => r.ok,
          () => false,
        ),
      60_000,
      `orchestrator as uid ${ORCH_UID} ready: ${proc.output()}`,
    );
  } catch (err) {
    await stop();
    throw err;
  }
  const tokenFile = join(home, '.config/kici/admin-token');
  const token = (await readFile(tokenFile, 'utf8')).trim();
  const api = async <T = unknown>(method: string, path: string, body?: unknown) => {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.status, body: (await res.json()) as T };
  };
  return {
    url,
    wsUrl: `ws://127.0.0.1:${port}/ws`,
    home,
    dataDir,
    tokenFile,
    api,
    // No event bus across processes: the job is read until it is in one of `states`.
    waitForJob: (id, states = FINAL, timeoutMs = 90_000) =>
      eventually(
        async () => {
          const j = (await api<JobBody>('GET', `/api/v1/jobs/${id}`)).body;
          return states.includes(j.state) ? j : undefined;
        },
        timeoutMs,
        `job ${id} in ${states.join('/')}`,
      ),
    output: proc.output,
    stop,
  };
}
