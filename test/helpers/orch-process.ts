import { readFile, rm } from 'node:fs/promises';
import { freePort } from './crash.js';
import { AGENT_BIN, ORCH_BIN, alive, runNode, type JobBody } from './orchestrator.js';
import { tempDir } from './temp-dirs.js';

export { freePort } from './crash.js';

export interface OrchProcess {
  url: string;
  wsUrl: string;
  pid: number;
  dataDir: string;
  adminToken: string;
  /** SIGKILL: a crash, nothing cleaned up. */
  kill9(): Promise<void>;
  /** The process has not exited (exit code and signal both unset). */
  running(): boolean;
  api<T = unknown>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }>;
  readyz(): Promise<{ status: number; body: { status: string; problem?: string } }>;
  waitForJob(jobId: string, timeoutMs?: number): Promise<JobBody>;
  output(): { stdout: string; stderr: string };
  /** SIGTERM, then wait; SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<void>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const FINAL = ['succeeded', 'failed', 'cancelled', 'timed-out', 'no-backend'];

/** `kici-orchestrator serve` as its own process, on an external PostgreSQL (else the embedded store). */
export async function startOrchestratorProcess(opts: {
  databaseUrl?: string;
  env?: NodeJS.ProcessEnv;
  args?: string[];
  /** This instance's own bootstrap token file (as on its own host); default: the tests' shared one. */
  adminTokenFile?: string;
}): Promise<OrchProcess> {
  const dataDir = await tempDir('kici-orchp-');
  const port = await freePort();
  const proc = runNode(
    [
      ORCH_BIN,
      'serve',
      '--listen',
      `127.0.0.1:${port}`,
      '--data-dir',
      dataDir,
      ...(opts.databaseUrl ? ['--database-url', opts.databaseUrl] : []),
      ...(opts.adminTokenFile ? ['--admin-token-file', opts.adminTokenFile] : []),
      ...(opts.args ?? []),
    ],
    { KICI_LOG_LEVEL: 'info', ...opts.env },
  );
  const url = `http://127.0.0.1:${port}`;
  // Generous: beside the system tier's guests and engines a 2-core host can starve a start.
  const until = Date.now() + 120_000;
  for (;;) {
    if (proc.child.exitCode !== null || proc.child.signalCode !== null)
      throw new Error(`orchestrator exited during start: ${proc.output().stderr}${proc.output().stdout}`);
    const ok = await fetch(`${url}/readyz`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) break;
    if (Date.now() > until) {
      // Not left behind for the next test to trip over.
      proc.child.kill('SIGKILL');
      await proc.exited;
      throw new Error(`orchestrator not ready: ${proc.output().stdout}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const token = (await readFile(opts.adminTokenFile ?? process.env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim();
  const api = async <T>(method: string, path: string, body?: unknown) => {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // a plain-text error body is returned as is
    }
    return { status: res.status, body: parsed as T };
  };
  const pid = proc.child.pid!;
  return {
    url,
    wsUrl: `ws://127.0.0.1:${port}/ws`,
    pid,
    dataDir,
    adminToken: token,
    async kill9() {
      if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGKILL');
      await proc.exited;
    },
    running: () => proc.child.exitCode === null && proc.child.signalCode === null,
    api,
    async readyz() {
      const r = await fetch(`${url}/readyz`);
      return { status: r.status, body: (await r.json()) as { status: string; problem?: string } };
    },
    async waitForJob(jobId, timeoutMs = 120_000) {
      const limit = Date.now() + timeoutMs;
      for (;;) {
        const { status, body } = await api<JobBody>('GET', `/api/v1/jobs/${jobId}`).catch(() => ({
          status: 0,
          body: undefined as unknown as JobBody,
        }));
        if (status === 200 && FINAL.includes(body.state)) return body;
        if (Date.now() > limit) throw new Error(`job ${jobId} not final after ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    output: proc.output,
    async stop(graceMs = 20_000) {
      if (proc.child.exitCode === null && proc.child.signalCode === null) {
        proc.child.kill('SIGTERM');
        const t = setTimeout(() => alive(pid) && proc.child.kill('SIGKILL'), graceMs);
        await proc.exited;
        clearTimeout(t);
      }
      await rm(dataDir, { recursive: true, force: true });
    },
    exited: proc.exited,
  };
}

/** A static agent process with a fresh token from `orch`, connected to `wsUrl` (default: orch's). */
export async function startStaticAgentProcess(
  orch: OrchProcess,
  agentId: string,
  labels: string[],
  wsUrl = orch.wsUrl,
) {
  const tok = await orch.api<{ token: string }>('POST', '/api/v1/agents/tokens', { labels, agentId });
  if (tok.status !== 201) throw new Error(`token for ${agentId}: ${tok.status} ${JSON.stringify(tok.body)}`);
  return runNode([AGENT_BIN], {
    KICI_ORCHESTRATOR_URL: wsUrl,
    KICI_AGENT_ID: agentId,
    KICI_AGENT_TOKEN: tok.body.token,
    KICI_LABELS: labels.join(','),
  });
}
