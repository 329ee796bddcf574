/**
 * A remote Docker engine over TLS, reached the way the docker CLI reaches it: DOCKER_HOST=tcp://…,
 * DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH holding ca.pem, cert.pem and key.pem. A second dockerd
 * of this test's own (its own data, exec root, pid file and socket; no bridge and no iptables, so it
 * cannot clash with the shared one) serves TLS with client verification on a free loopback port.
 * The backend's client pings it, reads its version and lists its containers; without the client
 * certificate, with another CA, and in plain HTTP it is refused.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ScalerEntry } from '../../../src/config/index.js';
import { connectEngine } from '../../../src/scaler/backends/engine-client.js';
import { freePort } from '../../helpers/crash.js';

let dir = '';
let port = 0;
let dockerd: ChildProcess | undefined;
let dockerdLog = '';

const ossl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });

/** A key and a certificate for `cn` signed by `ca`, with the given extensions. */
function issue(name: string, cn: string, ca: string, ext: string): void {
  ossl(
    ...['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'],
    ...['-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${cn}`],
  );
  writeFileSync(join(dir, `${name}.ext`), ext);
  ossl(
    ...['x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`],
    ...['-CAcreateserial', '-days', '2', '-out', `${name}.crt`, '-extfile', `${name}.ext`],
  );
}

function makeCa(name: string): void {
  ossl(
    ...['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'],
    ...['-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`],
  );
}

/** A DOCKER_CERT_PATH directory holding the named files under the docker CLI's names. */
async function certDir(name: string, files: { ca?: string; cert?: string; key?: string }): Promise<string> {
  const d = join(dir, name);
  await mkdir(d);
  if (files.ca) await copyFile(join(dir, files.ca), join(d, 'ca.pem'));
  if (files.cert) await copyFile(join(dir, files.cert), join(d, 'cert.pem'));
  if (files.key) await copyFile(join(dir, files.key), join(d, 'key.pem'));
  return d;
}

/** The backend's client for an entry with no host of its own: DOCKER_HOST and the TLS variables decide. */
async function client(env: NodeJS.ProcessEnv, host?: string): Promise<Docker> {
  const entry = { name: 'tls', type: 'container', runtime: 'auto', ...(host ? { host } : {}) };
  return (await connectEngine(entry as unknown as ScalerEntry, env)).docker;
}

async function waitForDockerd(sock: string, deadlineMs: number): Promise<void> {
  const local = new Docker({ socketPath: sock });
  const until = Date.now() + deadlineMs;
  let exited = false;
  dockerd!.once('exit', () => (exited = true));
  for (;;) {
    if (exited) throw new Error(`the test dockerd exited at start-up:\n${dockerdLog.slice(-3000)}`);
    try {
      await local.ping();
      return;
    } catch (err) {
      if (Date.now() > until)
        throw new Error(
          `the test dockerd did not answer within ${deadlineMs} ms\n${dockerdLog.slice(-3000)}`,
          { cause: err },
        );
    }
    // Polled with a deadline: dockerd reports readiness only through its socket.
    await new Promise((r) => setTimeout(r, 100));
  }
}

const BRIDGE = 'kici-dtls0';

// Docker only: the Podman run of the engine suite leaves this file out (DOCKER_ONLY_ENGINE).
describe('a remote Docker engine over TLS', () => {
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kici-dtls-'));
    makeCa('ca');
    makeCa('other-ca');
    issue('server', '127.0.0.1', 'ca', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
    issue('client', 'kici-test-client', 'ca', 'extendedKeyUsage=clientAuth\n');
    issue('stranger', 'kici-test-stranger', 'other-ca', 'extendedKeyUsage=clientAuth\n');
    port = await freePort();
    execFileSync('ip', ['link', 'add', BRIDGE, 'type', 'bridge']);
    execFileSync('ip', ['addr', 'add', '10.233.77.1/24', 'dev', BRIDGE]);
    execFileSync('ip', ['link', 'set', BRIDGE, 'up']);
    const sock = join(dir, 'docker.sock');
    dockerd = spawn(
      'dockerd',
      [
        ...['--data-root', join(dir, 'data'), '--exec-root', join(dir, 'exec')],
        ...['--pidfile', join(dir, 'dockerd.pid'), '-H', `unix://${sock}`, '-H', `tcp://127.0.0.1:${port}`],
        ...['--tlsverify', '--tlscacert', join(dir, 'ca.crt')],
        ...['--tlscert', join(dir, 'server.crt'), '--tlskey', join(dir, 'server.key')],
        // Beside the shared dockerd: a bridge of its own, no firewall rules, no userland proxy. Not
        // `--bridge=none`: a dockerd started so deletes the namespace's docker0, the shared one's.
        ...[`--bridge=${BRIDGE}`, '--iptables=false', '--ip6tables=false', '--userland-proxy=false'],
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const keep = (b: Buffer) => (dockerdLog = (dockerdLog + b.toString()).slice(-20_000));
    dockerd.stdout!.on('data', keep);
    dockerd.stderr!.on('data', keep);
    await waitForDockerd(sock, 60_000);
  }, 90_000);

  afterAll(async () => {
    if (dockerd && dockerd.exitCode === null) {
      const gone = new Promise((r) => dockerd!.once('exit', r));
      dockerd.kill('SIGTERM');
      await gone;
    }
    if (dir) await rm(dir, { recursive: true, force: true });
    try {
      execFileSync('ip', ['link', 'del', BRIDGE]);
    } catch {
      // never made: the set-up failed before it
    }
  }, 60_000);

  it('pings, reads the version and lists containers with DOCKER_TLS_VERIFY and DOCKER_CERT_PATH', async () => {
    const certs = await certDir('good', { ca: 'ca.crt', cert: 'client.crt', key: 'client.key' });
    const env = { DOCKER_HOST: `tcp://127.0.0.1:${port}`, DOCKER_TLS_VERIFY: '1', DOCKER_CERT_PATH: certs };
    const docker = await client(env);
    expect(String(await docker.ping())).toBe('OK');
    expect((await docker.version()).ApiVersion).toMatch(/^\d+\.\d+$/);
    expect(await docker.listContainers({ all: true })).toEqual([]);
    // A scaler's own host field takes the same TLS settings.
    const viaHost = await client(
      { DOCKER_TLS_VERIFY: '1', DOCKER_CERT_PATH: certs },
      `tcp://127.0.0.1:${port}`,
    );
    expect(String(await viaHost.ping())).toBe('OK');
    // ~/.docker when DOCKER_CERT_PATH is not set.
    const home = join(dir, 'home');
    await mkdir(home);
    await certDir('home/.docker', { ca: 'ca.crt', cert: 'client.crt', key: 'client.key' });
    const viaHome = await client({
      DOCKER_HOST: `tcp://127.0.0.1:${port}`,
      DOCKER_TLS_VERIFY: '1',
      HOME: home,
    });
    expect(String(await viaHome.ping())).toBe('OK');
  });

  it('is refused without the client certificate', async () => {
    const certs = await certDir('ca-only', { ca: 'ca.crt' });
    const docker = await client({
      DOCKER_HOST: `tcp://127.0.0.1:${port}`,
      DOCKER_TLS_VERIFY: '1',
      DOCKER_CERT_PATH: certs,
    });
    await expect(docker.ping()).rejects.toThrow(/certificate required|bad certificate|ECONNRESET/i);
  });

  it('is refused with a client certificate from another CA, and refuses an engine it cannot verify', async () => {
    const stranger = await certDir('stranger', { ca: 'ca.crt', cert: 'stranger.crt', key: 'stranger.key' });
    await expect(
      (
        await client({
          DOCKER_HOST: `tcp://127.0.0.1:${port}`,
          DOCKER_TLS_VERIFY: '1',
          DOCKER_CERT_PATH: stranger,
        })
      ).ping(),
    ).rejects.toThrow(/certificate|ECONNRESET/i);
    // The engine's certificate is not from the CA this client trusts.
    const wrongCa = await certDir('wrong-ca', { ca: 'other-ca.crt', cert: 'client.crt', key: 'client.key' });
    await expect(
      (
        await client({
          DOCKER_HOST: `tcp://127.0.0.1:${port}`,
          DOCKER_TLS_VERIFY: '1',
          DOCKER_CERT_PATH: wrongCa,
        })
      ).ping(),
    ).rejects.toThrow(/certificate/i);
  });

  it('gets nothing in plain HTTP from the TLS port, and names the fix for port 2376', async () => {
    await expect((await client({ DOCKER_HOST: `tcp://127.0.0.1:${port}` })).ping()).rejects.toThrow(
      /HTTP request to an HTTPS server|400/,
    );
    await expect(client({ DOCKER_HOST: 'tcp://127.0.0.1:2376' })).rejects.toThrow(
      /port 2376 is Docker's TLS port.*DOCKER_TLS_VERIFY=1/,
    );
  });
});
