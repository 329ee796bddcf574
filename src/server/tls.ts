import { readFile } from 'node:fs/promises';
import { createServer as createHttpServer, type RequestListener, type Server } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { UserError } from '../util/errors.js';

/** `--tls-cert` and `--tls-key`: PEM files, re-read on SIGHUP. */
export interface TlsFiles {
  certPath: string;
  keyPath: string;
}

/** Both or neither: one alone is a mistake worth naming. */
export function tlsFilesFrom(cert: string | undefined, key: string | undefined): TlsFiles | undefined {
  if (!cert && !key) return undefined;
  if (!cert || !key)
    throw new UserError(
      `TLS needs both --tls-cert and --tls-key (KICI_TLS_CERT, KICI_TLS_KEY); only ${cert ? '--tls-cert' : '--tls-key'} was given`,
    );
  return { certPath: cert, keyPath: key };
}

async function readPem(path: string, flag: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (err) {
    throw new UserError(`${flag}: cannot read ${path}: ${(err as Error).message}`);
  }
}

export async function loadTlsPair(files: TlsFiles): Promise<{ cert: Buffer; key: Buffer }> {
  return {
    cert: await readPem(files.certPath, '--tls-cert'),
    key: await readPem(files.keyPath, '--tls-key'),
  };
}

/**
 * The listener: plain HTTP, or HTTPS when TLS files are given. With TLS there is no plain
 * listener at all, so http:// and ws:// to the port fail at the handshake.
 */
export async function createListener(
  listener: RequestListener,
  tls: TlsFiles | undefined,
): Promise<{ server: Server; reload?: () => Promise<void> }> {
  if (!tls) return { server: createHttpServer(listener) };
  let pair: { cert: Buffer; key: Buffer };
  try {
    pair = await loadTlsPair(tls);
    const server: HttpsServer = createHttpsServer({ ...pair, minVersion: 'TLSv1.2' }, listener);
    // A renewed certificate is taken for new connections; open ones keep theirs.
    const reload = async () =>
      server.setSecureContext({ ...(await loadTlsPair(tls)), minVersion: 'TLSv1.2' });
    return { server: server as unknown as Server, reload };
  } catch (err) {
    if (err instanceof UserError) throw err;
    throw new UserError(`--tls-cert/--tls-key: not a usable certificate and key: ${(err as Error).message}`);
  }
}
