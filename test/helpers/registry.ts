/**
 * A real image registry (Debian's docker-registry, distribution 2.8) with htpasswd auth, started in
 * the test's network namespace, which is the engine's. Docker pulls plain HTTP from 127.0.0.0/8;
 * Podman insists on TLS for every registry not declared insecure, so for it the registry serves TLS
 * with a throw-away CA the engine finds in /etc/containers/certs.d/<host:port>/ (read per pull).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Docker from 'dockerode';

export interface TestRegistry {
  /** `127.0.0.1:<port>`: the registry part of the image references pushed to it. */
  host: string;
  username: string;
  password: string;
  /** Everything the registry logged, for leak checks. */
  output(): string;
  stop(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => ok(port));
    });
  });
}

export async function startRegistry(opts: { tls: boolean; password: string }): Promise<TestRegistry> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-registry-'));
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const username = 'kici-ci';
  execFileSync('htpasswd', ['-bBc', join(dir, 'htpasswd'), username, opts.password], { stdio: 'pipe' });
  const certsDir = `/etc/containers/certs.d/${host}`;
  let tls = '';
  if (opts.tls) {
    execFileSync(
      'openssl',
      [
        ...['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1'],
        ...['-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', 'reg.key', '-out', 'reg.crt'],
      ],
      { cwd: dir, stdio: 'pipe' },
    );
    await mkdir(certsDir, { recursive: true });
    execFileSync('cp', [join(dir, 'reg.crt'), join(certsDir, 'ca.crt')]);
    tls = `, tls: { certificate: ${join(dir, 'reg.crt')}, key: ${join(dir, 'reg.key')} }`;
  }
  await writeFile(
    join(dir, 'config.yml'),
    [
      'version: 0.1',
      'log: { level: info }',
      `storage: { filesystem: { rootdirectory: ${join(dir, 'data')} } }`,
      `http: { addr: "${host}"${tls} }`,
      `auth: { htpasswd: { realm: kici-test, path: ${join(dir, 'htpasswd')} } }`,
    ].join('\n'),
  );
  let out = '';
  const child: ChildProcess = spawn('docker-registry', ['serve', join(dir, 'config.yml')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<void>((ok) => child.once('exit', () => ok()));
  await new Promise<void>((ok, fail) => {
    const onData = (b: Buffer) => {
      out += b.toString();
      if (out.includes(`listening on ${host}`)) ok();
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('error', fail);
    void exited.then(() => fail(new Error(`docker-registry exited before listening:\n${out}`)));
  });
  return {
    host,
    username,
    password: opts.password,
    output: () => out,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
      await rm(dir, { recursive: true, force: true });
      if (opts.tls) await rm(certsDir, { recursive: true, force: true });
    },
  };
}

/** Follows an engine progress stream; the engine reports failures inside a stream that ends normally. */
export function followEngine(docker: Docker, stream: NodeJS.ReadableStream): Promise<void> {
  return new Promise((ok, fail) => {
    let error: string | undefined;
    docker.modem.followProgress(
      stream,
      (err: unknown) => (err ? fail(err) : error ? fail(new Error(error)) : ok()),
      (ev: { error?: string }) => {
        if (ev.error) error = ev.error;
      },
    );
  });
}

/** Tags a local image as `<registry>/<repo>:<tag>`, pushes it with the registry's credentials, and
 * removes the local tag, so the engine has to pull it back. Returns the reference. */
export async function pushCopy(
  docker: Docker,
  reg: TestRegistry,
  source: string,
  repo: string,
  tag: string,
): Promise<string> {
  await docker.getImage(source).tag({ repo: `${reg.host}/${repo}`, tag });
  const ref = `${reg.host}/${repo}:${tag}`;
  const image = docker.getImage(ref);
  const auth = { username: reg.username, password: reg.password, serveraddress: reg.host };
  await followEngine(docker, (await image.push({ authconfig: auth })) as NodeJS.ReadableStream);
  await image.remove();
  return ref;
}
