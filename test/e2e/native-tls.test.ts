/**
 * Native TLS: a certificate authority made here with the openssl CLI signs the server's
 * certificate; a real static agent trusts it through KICI_CA_FILE, connects over wss:// and runs a
 * job; plain ws:// and http:// to the same port are refused; a renewed certificate written over the
 * files is served to new connections after SIGHUP.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { connect } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/crash.js';
import { freshDataDir } from '../helpers/data-dir.js';
import { AGENT_BIN, ORCH_BIN, alive, eventually, runNode } from '../helpers/orchestrator.js';

let dir = '';
let dataDir = '';
let port = 0;
let serve: ReturnType<typeof runNode> | undefined;
let agent: ReturnType<typeof runNode> | undefined;
let ca: Buffer;
let adminToken = '';

const ossl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });

/** A fresh server certificate for 127.0.0.1 signed by the test CA; returns its serial. */
function issue(serial: string): void {
  ossl(
    'req',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    'srv.key',
    '-out',
    'srv.csr',
    '-subj',
    '/CN=127.0.0.1',
  );
  ossl(
    'x509',
    '-req',
    '-in',
    'srv.csr',
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-set_serial',
    serial,
    '-days',
    '2',
    '-out',
    'srv.crt',
    '-extfile',
    'ext.cnf',
  );
}

function peerSerial(): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, ca, servername: undefined }, () => {
      const serial = s.getPeerCertificate().serialNumber;
      s.end();
      resolve(serial);
    });
    s.on('error', reject);
  });
}

function api<T>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path,
        method,
        ca,
        headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      },
      (res) => {
        let text = '';
        res.on('data', (d) => (text += String(d)));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as T }));
      },
    );
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-tls-'));
  await writeFile(join(dir, 'ext.cnf'), 'subjectAltName=IP:127.0.0.1\n');
  ossl(
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
    '-days',
    '2',
    '-subj',
    '/CN=kici test CA',
  );
  ca = await readFile(join(dir, 'ca.crt'));
  issue('0x1001');
  dataDir = await freshDataDir();
  port = await freePort();
  serve = runNode(
    [
      ORCH_BIN,
      'serve',
      '--listen',
      `127.0.0.1:${port}`,
      '--data-dir',
      dataDir,
      '--tls-cert',
      join(dir, 'srv.crt'),
      '--tls-key',
      join(dir, 'srv.key'),
    ],
    { KICI_LOG_LEVEL: 'info', KICI_ADMIN_TOKEN_FILE: join(dir, 'admin-token') },
  );
  await eventually(
    () =>
      serve!.output().stdout.includes(`ready on https://127.0.0.1:${port}`) || serve!.child.exitCode !== null,
    60_000,
    'serve ready',
  );
  expect(serve.child.exitCode, serve.output().stderr).toBeNull();
  adminToken = (await readFile(join(dir, 'admin-token'), 'utf8')).trim();
});

afterAll(async () => {
  for (const p of [agent, serve]) {
    if (p?.child.pid && alive(p.child.pid) && p.child.exitCode === null) p.child.kill('SIGKILL');
    await p?.exited;
  }
  for (const d of [dir, dataDir]) if (d) await rm(d, { recursive: true, force: true });
});

describe('native TLS', () => {
  it('a real agent trusting the test CA connects over wss:// and runs a job', async () => {
    const tok = await api<{ token: string }>('POST', '/api/v1/agents/tokens', {
      labels: ['linux', 'tls'],
      agentId: 'tls-1',
    });
    expect(tok.status).toBe(201);
    agent = runNode([AGENT_BIN], {
      KICI_ORCHESTRATOR_URL: `wss://127.0.0.1:${port}/ws`,
      KICI_AGENT_ID: 'tls-1',
      KICI_AGENT_TOKEN: tok.body.token,
      KICI_LABELS: 'linux,tls',
      KICI_CA_FILE: join(dir, 'ca.crt'),
    });
    const run = await api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { hello: { runsOn: ['linux', 'tls'], steps: [{ run: 'echo over-tls' }] } },
    });
    const jobId = run.body.jobs[0]!.id;
    const job = await eventually(
      async () => {
        const r = await api<{ state: string }>('GET', `/api/v1/jobs/${jobId}`);
        return ['succeeded', 'failed'].includes(r.body.state) ? r.body : undefined;
      },
      60_000,
      'the job over TLS',
    );
    expect(job.state).toBe('succeeded');
  });

  it('refuses plain ws:// and http:// on the TLS port', async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${port}/ws`);
    const outcome = await new Promise<string>((resolve) => {
      ws.on('open', () => resolve('open'));
      ws.on('error', () => resolve('error'));
    });
    ws.terminate();
    expect(outcome).toBe('error');
    const plain = await fetch(`http://127.0.0.1:${port}/healthz`).then(
      (r) => `status ${r.status}`,
      () => 'failed',
    );
    expect(plain).toBe('failed');
  });

  it('serves a renewed certificate after SIGHUP', async () => {
    expect((await peerSerial()).toUpperCase()).toBe('1001');
    issue('0x2002');
    const logged = serve!.output().stdout.split('TLS certificate and key reloaded').length;
    serve!.child.kill('SIGHUP');
    await eventually(
      () => serve!.output().stdout.split('TLS certificate and key reloaded').length > logged,
      10_000,
      'the reload log line',
    );
    expect((await peerSerial()).toUpperCase()).toBe('2002');
  });
});
