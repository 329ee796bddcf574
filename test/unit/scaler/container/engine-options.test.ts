/**
 * The engine client's connection, read from the environment as the Docker CLI reads it: TLS from
 * DOCKER_TLS_VERIFY / DOCKER_TLS, certificates from DOCKER_CERT_PATH (default ~/.docker), and
 * never plain HTTP to Docker's TLS port.
 */
import fc from 'fast-check';
import { Agent } from 'node:https';
import { describe, expect, it } from 'vitest';
import { locateEngine, type EngineConnection } from '../../../../src/scaler/backends/container-runtime.js';
import { dockerOptionsFor, type ReadPem } from '../../../../src/scaler/backends/engine-options.js';
import { UserError } from '../../../../src/util/errors.js';

const remote = (host: string): EngineConnection => ({ socketPath: host, runtime: 'docker', local: false });

/** A directory of PEM files in memory: path → contents. */
function files(dir: string, names: string[]): ReadPem {
  const have = new Map(names.map((n) => [`${dir}/${n}`, Buffer.from(`pem of ${n}`)]));
  return (p) => have.get(p);
}
const ALL = ['ca.pem', 'cert.pem', 'key.pem'];

describe('dockerOptionsFor', () => {
  it('uses a local socket as is', () => {
    expect(dockerOptionsFor({ socketPath: '/run/docker.sock', runtime: 'docker', local: true }, {})).toEqual({
      socketPath: '/run/docker.sock',
    });
  });

  it('speaks verified TLS with the CA and client certificate from DOCKER_CERT_PATH', () => {
    const o = dockerOptionsFor(
      remote('tcp://engine.example:2376'),
      { DOCKER_TLS_VERIFY: '1', DOCKER_CERT_PATH: '/certs' },
      files('/certs', ALL),
    );
    expect(o).toEqual({
      protocol: 'https',
      host: 'engine.example',
      port: 2376,
      ca: Buffer.from('pem of ca.pem'),
      cert: Buffer.from('pem of cert.pem'),
      key: Buffer.from('pem of key.pem'),
    });
    // No agent of ours: Node verifies the engine against `ca` (rejectUnauthorized defaults to on).
    expect(o.agent).toBeUndefined();
  });

  it('reads ~/.docker when DOCKER_CERT_PATH is not set, and defaults the port to 2376 under TLS', () => {
    const o = dockerOptionsFor(
      remote('tcp://10.0.0.5'),
      { DOCKER_TLS_VERIFY: 'yes', HOME: '/home/op' },
      files('/home/op/.docker', ALL),
    );
    expect(o).toMatchObject({ protocol: 'https', host: '10.0.0.5', port: 2376, ca: expect.any(Buffer) });
  });

  it('counts any non-empty DOCKER_TLS_VERIFY as on, even "0", as the docker CLI does', () => {
    expect(() =>
      dockerOptionsFor(remote('tcp://h:2376'), { DOCKER_TLS_VERIFY: '0' }, () => undefined),
    ).toThrow(/DOCKER_TLS_VERIFY is set but .*ca\.pem is missing/);
  });

  it('refuses plain HTTP to the TLS port, naming the fix', () => {
    const err = (() => {
      try {
        dockerOptionsFor(remote('tcp://engine.example:2376'), {}, files('/x', ALL));
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(UserError);
    expect((err as Error).message).toMatch(
      /port 2376 is Docker's TLS port.*DOCKER_TLS_VERIFY=1.*DOCKER_CERT_PATH/,
    );
    // An empty DOCKER_TLS_VERIFY is "not set".
    expect(() => dockerOptionsFor(remote('tcp://h:2376'), { DOCKER_TLS_VERIFY: '' })).toThrow(UserError);
  });

  it('speaks plain HTTP to 2375, and defaults to it without TLS', () => {
    expect(dockerOptionsFor(remote('tcp://h:2375'), {})).toEqual({ protocol: 'http', host: 'h', port: 2375 });
    expect(dockerOptionsFor(remote('tcp://h'), {})).toEqual({ protocol: 'http', host: 'h', port: 2375 });
  });

  it('skips verifying the engine only when DOCKER_TLS alone asks for it', () => {
    const o = dockerOptionsFor(remote('tcp://h:2376'), { DOCKER_TLS: '1', HOME: '/h' }, () => undefined);
    expect(o.protocol).toBe('https');
    expect(o.agent).toBeInstanceOf(Agent);
    expect((o.agent as Agent).options.rejectUnauthorized).toBe(false);
    const both = dockerOptionsFor(
      remote('tcp://h:2376'),
      { DOCKER_TLS: '1', DOCKER_TLS_VERIFY: '1', DOCKER_CERT_PATH: '/c' },
      files('/c', ALL),
    );
    expect(both.agent).toBeUndefined();
  });

  it('treats https:// as TLS, verified against the system CAs when no ca.pem is there', () => {
    const o = dockerOptionsFor(remote('https://engine.example'), { HOME: '/h' }, () => undefined);
    expect(o).toEqual({ protocol: 'https', host: 'engine.example', port: 2376 });
  });

  it('refuses a client certificate without its key, and the reverse', () => {
    expect(() =>
      dockerOptionsFor(
        remote('tcp://h:2376'),
        { DOCKER_TLS_VERIFY: '1', DOCKER_CERT_PATH: '/c' },
        files('/c', ['ca.pem', 'cert.pem']),
      ),
    ).toThrow(/\/c\/key\.pem is missing/);
    expect(() =>
      dockerOptionsFor(
        remote('tcp://h:2376'),
        { DOCKER_TLS_VERIFY: '1', DOCKER_CERT_PATH: '/c' },
        files('/c', ['ca.pem', 'key.pem']),
      ),
    ).toThrow(/\/c\/cert\.pem is missing/);
  });

  it('keeps ssh:// with its user and port 22, and refuses other schemes', () => {
    expect(dockerOptionsFor(remote('ssh://ci@build-host'), {})).toEqual({
      protocol: 'ssh',
      host: 'build-host',
      port: 22,
      username: 'ci',
    });
    expect(() => dockerOptionsFor(remote('ftp://h'), {})).toThrow(/ftp:\/\/ is not supported/);
    expect(() => dockerOptionsFor(remote('not a url'), {})).toThrow(/not a URL/);
  });

  it('never speaks plain HTTP to port 2376, and always TLS when DOCKER_TLS_VERIFY is set', () => {
    const env = fc.record(
      {
        DOCKER_TLS_VERIFY: fc.constantFrom('', '1', '0', 'true'),
        DOCKER_TLS: fc.constantFrom('', '1'),
        DOCKER_CERT_PATH: fc.constant('/c'),
      },
      { requiredKeys: ['DOCKER_CERT_PATH'] },
    );
    fc.assert(
      fc.property(
        fc.constantFrom('tcp', 'http', 'https'),
        fc.option(fc.integer({ min: 1, max: 65535 }), { nil: undefined }),
        fc.constantFrom(2376, 2375, undefined),
        env,
        (scheme, anyPort, wellKnown, e) => {
          const port = wellKnown ?? anyPort;
          const url = `${scheme}://engine.test${port ? `:${port}` : ''}`;
          let o;
          try {
            o = dockerOptionsFor(remote(url), e, files('/c', ALL));
          } catch (err) {
            expect(err).toBeInstanceOf(UserError);
            return;
          }
          if (o.port === 2376) expect(o.protocol).toBe('https');
          if (e.DOCKER_TLS_VERIFY) {
            expect(o.protocol).toBe('https');
            expect(o.agent).toBeUndefined();
          }
        },
      ),
    );
  });
});

describe('DOCKER_HOST', () => {
  const entry = (o: { host?: string; socketPath?: string; runtime?: 'auto' | 'docker' | 'podman' }) => ({
    name: 'c',
    runtime: 'auto' as const,
    ...o,
  });

  it('stands in for the default socket, after host and socketPath', async () => {
    const env = { DOCKER_HOST: 'tcp://engine.example:2376' };
    expect(await locateEngine(entry({}), { env, canUse: async () => true })).toEqual({
      socketPath: 'tcp://engine.example:2376',
      runtime: 'docker',
      local: false,
    });
    expect(await locateEngine(entry({ host: 'tcp://other:2375' }), { env })).toMatchObject({
      socketPath: 'tcp://other:2375',
    });
    expect(await locateEngine(entry({ socketPath: '/s.sock' }), { env })).toMatchObject({
      socketPath: '/s.sock',
    });
    expect(
      await locateEngine(entry({}), {
        env: { DOCKER_HOST: 'unix:///tmp/d.sock' },
        canUse: async () => false,
      }),
    ).toEqual({ socketPath: '/tmp/d.sock', runtime: 'docker', local: true });
  });

  it('is not taken for a scaler that asks for Podman', async () => {
    const got = await locateEngine(entry({ runtime: 'podman' }), {
      env: { DOCKER_HOST: 'tcp://engine.example:2376' },
      canUse: async (p) => p === '/run/podman/podman.sock',
    });
    expect(got).toEqual({ socketPath: '/run/podman/podman.sock', runtime: 'podman', local: true });
  });
});
