/**
 * Operator access on a real `serve` process (embedded PGlite): the bootstrap admin token is written
 * outside the data dir and found by kici-admin on its own; access tokens made with kici-admin carry
 * a role, a wrong role gets 403 naming the role needed, a revoked token is refused at once, and
 * every mutating or refused call leaves an audit row naming its token.
 */
import { mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  adminApi,
  freePort,
  killAgentsOf,
  killServe,
  startServe,
  type ServeProcess,
} from '../helpers/crash.js';
import { freshDataDir } from '../helpers/data-dir.js';
import { ADMIN_BIN, bareMetalConfig, runNode, writeConfig } from '../helpers/orchestrator.js';

let serve: ServeProcess | undefined;
let port = 0;
let dataDir = '';
let etc = '';
let tokenFile = '';
let configDir = '';

beforeAll(async () => {
  dataDir = await freshDataDir();
  etc = await mkdtemp(join(tmpdir(), 'kici-etc-e2e-'));
  tokenFile = join(etc, 'kici', 'admin-token');
  const config = await writeConfig(bareMetalConfig());
  configDir = join(config, '..');
  port = await freePort();
  serve = await startServe({ config, port, dataDir, env: { KICI_ADMIN_TOKEN_FILE: tokenFile } });
});

afterAll(async () => {
  if (serve && serve.child.exitCode === null) {
    serve.child.kill('SIGTERM');
    await serve.exited;
  }
  await killServe(serve);
  await killAgentsOf(port);
  for (const d of [dataDir, etc, configDir]) if (d) await rm(d, { recursive: true, force: true });
});

/** kici-admin on the orchestrator's host: no token given, it reads the bootstrap file. */
async function admin(args: string[], token?: string) {
  const r = await runNode([ADMIN_BIN, ...args], {
    KICI_SERVER_URL: serve!.url,
    KICI_ADMIN_TOKEN_FILE: tokenFile,
    KICI_ADMIN_TOKEN: token ?? '',
  }).exited;
  return r;
}

async function create(name: string, role: string) {
  const r = await admin(['access', 'token', 'create', '--name', name, '--role', role, '--json']);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as { id: string; name: string; role: string; token: string; expiresAt: null };
}

interface AuditRow {
  tokenName: string | null;
  role: string | null;
  action: string;
  target: string | null;
  result: string;
  status: number;
  remote: string | null;
}

describe('access tokens on a real server', () => {
  it('writes the bootstrap admin token outside the data dir, mode 0600, and logs where (not what)', async () => {
    const secret = (await readFile(tokenFile, 'utf8')).trim();
    expect(secret).toMatch(/^kici_at_/);
    expect((await stat(tokenFile)).mode & 0o777).toBe(0o600);
    expect(await readdir(dataDir)).not.toContain('admin-token');
    const out = serve!.output().stdout + serve!.output().stderr;
    expect(out).toContain(tokenFile);
    expect(out).not.toContain(secret);
  });

  it('gives each role its calls, refuses the rest with 403 naming the role, and audits them', async () => {
    const viewer = await create('dash', 'viewer');
    const operator = await create('ci', 'operator');
    expect(viewer).toMatchObject({ name: 'dash', role: 'viewer', expiresAt: null });
    expect(viewer.id).toMatch(/^at-/);
    const asViewer = adminApi(serve!.url, viewer.token);
    const asOperator = adminApi(serve!.url, operator.token);

    // A viewer reads jobs and metrics, and may not submit or cancel.
    expect((await asViewer('GET', '/api/v1/jobs')).status).toBe(200);
    const scrape = await fetch(`${serve!.url}/metrics`, {
      headers: { authorization: `Bearer ${viewer.token}` },
    });
    expect(scrape.status).toBe(200);
    expect((await fetch(`${serve!.url}/metrics`)).status).toBe(401);
    const run = { jobs: { a: { runsOn: ['linux', 'small'], steps: [{ run: 'echo hi' }] } } };
    const refused = await asViewer<{ problems: string[] }>('POST', '/api/v1/runs', run);
    expect(refused.status).toBe(403);
    expect(refused.body.problems[0]).toMatch(/needs the operator role; token "dash" has the viewer role/);

    // An operator submits and cancels, and may not make tokens.
    const submitted = await asOperator<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', run);
    expect(submitted.status).toBe(201);
    const jobId = submitted.body.jobs[0]!.id;
    const cancel = await asViewer<{ problems: string[] }>('POST', `/api/v1/jobs/${jobId}/cancel`);
    expect(cancel.status).toBe(403);
    const mint = await asOperator<{ problems: string[] }>('POST', '/api/v1/access/tokens', {
      name: 'sneaky',
      role: 'admin',
    });
    expect(mint.status).toBe(403);
    expect(mint.body.problems[0]).toMatch(/needs the admin role/);
    const agentMint = await asOperator('POST', '/api/v1/agents/tokens', { labels: ['linux'] });
    expect(agentMint.status).toBe(403);

    // The CLI shows the role error too, and exits 1.
    const cli = await admin(['access', 'token', 'list'], operator.token);
    expect(cli.code).toBe(1);
    expect(cli.stderr).toMatch(/needs the admin role/);

    // Revoked on the CLI: refused from the next call.
    const revoke = await admin(['access', 'token', 'revoke', 'dash']);
    expect(revoke.code, revoke.stderr).toBe(0);
    expect(revoke.stdout).toContain(viewer.id);
    expect((await asViewer('GET', '/api/v1/jobs')).status).toBe(401);
    const list = await admin(['access', 'token', 'list', '--all', '--json']);
    const tokens = JSON.parse(list.stdout) as { name: string; state: string; bootstrap: boolean }[];
    expect(tokens.find((t) => t.name === 'dash')?.state).toBe('revoked');
    expect(tokens.filter((t) => t.bootstrap)).toHaveLength(1);

    const audit = await admin(['audit', 'list', '--since', '1h', '--json']);
    expect(audit.code, audit.stderr).toBe(0);
    const rows = JSON.parse(audit.stdout) as AuditRow[];
    const find = (p: Partial<AuditRow>) =>
      rows.find((r) => Object.entries(p).every(([k, v]) => r[k as keyof AuditRow] === v));
    expect(find({ tokenName: 'ci', action: 'run.submit', result: 'ok', status: 201 })).toBeTruthy();
    expect(find({ tokenName: 'dash', action: 'run.submit', result: 'denied', status: 403 })).toBeTruthy();
    expect(find({ tokenName: 'dash', action: 'job.cancel', target: jobId, result: 'denied' })).toBeTruthy();
    expect(find({ tokenName: 'ci', action: 'access-token.create', result: 'denied' })).toBeTruthy();
    expect(find({ tokenName: 'dash', action: 'job.list', result: 'denied', status: 401 })).toBeTruthy();
    expect(find({ role: 'admin', action: 'access-token.create', target: 'ci', result: 'ok' })).toBeTruthy();
    const revoked = find({ action: 'access-token.revoke', result: 'ok' });
    expect(revoked?.target).toContain('dash');
    expect(revoked?.remote).toMatch(/127\.0\.0\.1/);
    // Reads are not audited when they are allowed.
    expect(find({ tokenName: 'dash', action: 'job.list', result: 'ok' })).toBeUndefined();
  });

  it('names the field or flag on bad input', async () => {
    const badRole = await admin(['access', 'token', 'create', '--name', 'x', '--role', 'root']);
    expect(badRole.code).toBe(2); // a bad value is a usage error
    expect(badRole.stderr).toMatch(/--role: one of viewer, operator, admin/);
    const badTtl = await admin([
      'access',
      'token',
      'create',
      '--name',
      'x',
      '--role',
      'viewer',
      '--expires-in',
      'soon',
    ]);
    expect(badTtl.stderr).toMatch(/--expires-in/);
    const dup = await admin(['access', 'token', 'create', '--name', 'ci', '--role', 'viewer']);
    expect(dup.code).toBe(1);
    expect(dup.stderr).toMatch(/already called "ci"/);
    const since = await admin(['audit', 'list', '--since', 'yesterday-ish']);
    expect(since.stderr).toMatch(/since: a duration/);
  });
});
