/**
 * How the engine client connects, read as the Docker CLI reads it: a unix socket is used as is; a
 * `tcp://` host speaks TLS when DOCKER_TLS_VERIFY (verified) or DOCKER_TLS (not verified) is set
 * non-empty, with `ca.pem`, `cert.pem` and `key.pem` from DOCKER_CERT_PATH (default `~/.docker`).
 * Port 2376 is Docker's TLS port: plain HTTP to it is refused here rather than tried.
 */
import { readFileSync } from 'node:fs';
import { Agent } from 'node:https';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { DockerOptions } from 'dockerode';
import { UserError } from '../../util/errors.js';
import type { EngineConnection } from './container-runtime.js';

/** Docker's conventional ports: plain HTTP and TLS. */
export const DOCKER_PLAIN_PORT = 2375;
export const DOCKER_TLS_PORT = 2376;

const CERT_FILES_FIX =
  'point DOCKER_CERT_PATH at the directory holding ca.pem, cert.pem and key.pem (the default is ~/.docker), as for the docker CLI';

/** Reads one PEM file; undefined when it is not there. Injectable for tests. */
export type ReadPem = (path: string) => Buffer | undefined;

export const readPemIfPresent: ReadPem = (path) => {
  try {
    return readFileSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new UserError(`cannot read ${path}: ${(err as Error).message}; ${CERT_FILES_FIX}`);
  }
};

/** dockerode's options; `agent` is passed on to https (its types leave it out). */
export type EngineClientOptions = DockerOptions & { agent?: Agent };

const set = (v: string | undefined): boolean => v !== undefined && v !== '';

/** The dockerode options for `engine` under `env` (DOCKER_TLS_VERIFY, DOCKER_TLS, DOCKER_CERT_PATH, HOME). */
export function dockerOptionsFor(
  engine: EngineConnection,
  env: NodeJS.ProcessEnv = process.env,
  readPem: ReadPem = readPemIfPresent,
): EngineClientOptions {
  if (engine.local) return { socketPath: engine.socketPath };
  const where = engine.socketPath;
  let u: URL;
  try {
    u = new URL(where);
  } catch {
    throw new UserError(`engine host "${where}" is not a URL; write it as tcp://host:2376 (or unix:///path)`);
  }
  const host = u.hostname.replace(/^\[|\]$/g, '');
  if (u.protocol === 'ssh:')
    return {
      protocol: 'ssh',
      host,
      port: Number(u.port) || 22,
      ...(u.username ? { username: decodeURIComponent(u.username) } : {}),
    };
  if (!['tcp:', 'http:', 'https:'].includes(u.protocol))
    throw new UserError(
      `engine host "${where}": ${u.protocol}// is not supported; use tcp://, unix:// or ssh://`,
    );
  const verifyAsked = set(env.DOCKER_TLS_VERIFY);
  const tls = verifyAsked || set(env.DOCKER_TLS) || u.protocol === 'https:';
  const port = Number(u.port) || (tls ? DOCKER_TLS_PORT : DOCKER_PLAIN_PORT);
  if (!tls) {
    if (port === DOCKER_TLS_PORT)
      throw new UserError(
        `engine host "${where}": port ${DOCKER_TLS_PORT} is Docker's TLS port, but TLS is not configured; set DOCKER_TLS_VERIFY=1 and ${CERT_FILES_FIX}, or name the engine's plain-HTTP port (${DOCKER_PLAIN_PORT})`,
      );
    return { protocol: 'http', host, port };
  }
  // Not verifying the engine is an explicit choice (DOCKER_TLS alone), never a fallback.
  const verify = verifyAsked || !set(env.DOCKER_TLS);
  const dir = env.DOCKER_CERT_PATH || join(env.HOME || homedir(), '.docker');
  const ca = readPem(join(dir, 'ca.pem'));
  const cert = readPem(join(dir, 'cert.pem'));
  const key = readPem(join(dir, 'key.pem'));
  if (verifyAsked && !ca)
    throw new UserError(
      `DOCKER_TLS_VERIFY is set but ${join(dir, 'ca.pem')} is missing, so engine "${where}" cannot be verified; ${CERT_FILES_FIX}`,
    );
  if (!cert !== !key)
    throw new UserError(
      `${join(dir, cert ? 'key.pem' : 'cert.pem')} is missing: the client certificate and its key go together; ${CERT_FILES_FIX}`,
    );
  const pems = { ...(ca ? { ca } : {}), ...(cert && key ? { cert, key } : {}) };
  return {
    protocol: 'https',
    host,
    port,
    ...pems,
    ...(verify ? {} : { agent: new Agent({ ...pems, rejectUnauthorized: false }) }),
  };
}
