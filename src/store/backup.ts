import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile } from 'node:fs/promises';
import { PGlite } from '@electric-sql/pglite';
import { UserError, errorMessage } from '../util/errors.js';
import { prepareDataDir, tightenModes } from './data-dir.js';

/**
 * A backup file of the embedded database: a first line naming the format, a JSON line with the
 * SHA-256 and length of the body, then the body (the database files as a gzip tarball).
 * Restore refuses a file whose body does not match its checksum.
 */
const MAGIC = 'KICI-BACKUP 1';

export interface BackupHeader {
  engine: 'pglite';
  sha256: string;
  bytes: number;
  createdAt: string;
  version: string;
}

export function encodeBackup(body: Uint8Array, meta: { createdAt: Date; version: string }): Buffer {
  const header: BackupHeader = {
    engine: 'pglite',
    sha256: createHash('sha256').update(body).digest('hex'),
    bytes: body.byteLength,
    createdAt: meta.createdAt.toISOString(),
    version: meta.version,
  };
  return Buffer.concat([Buffer.from(`${MAGIC}\n${JSON.stringify(header)}\n`), body]);
}

/** The header and body of a backup file; a UserError names what is wrong with a bad one. */
export function decodeBackup(file: Buffer, name: string): { header: BackupHeader; body: Buffer } {
  const first = file.indexOf(0x0a);
  const second = first < 0 ? -1 : file.indexOf(0x0a, first + 1);
  if (first < 0 || second < 0 || file.subarray(0, first).toString() !== MAGIC)
    throw new UserError(`${name}: not a kici backup (it must start with "${MAGIC}")`);
  let header: BackupHeader;
  try {
    header = JSON.parse(file.subarray(first + 1, second).toString()) as BackupHeader;
  } catch {
    throw new UserError(`${name}: the backup's header is damaged`);
  }
  const body = file.subarray(second + 1);
  if (body.byteLength !== header.bytes)
    throw new UserError(
      `${name}: the backup is ${body.byteLength} bytes long where its header says ${header.bytes}; it is truncated or damaged`,
    );
  const sum = createHash('sha256').update(body).digest('hex');
  if (sum !== header.sha256)
    throw new UserError(
      `${name}: checksum mismatch (header ${header.sha256}, contents ${sum}); the backup is damaged, refusing to restore it`,
    );
  return { header, body };
}

/**
 * `kici-orchestrator restore --from FILE --data-dir DIR`: checks the backup, then unpacks it as
 * the embedded database of a new data dir. A data dir that already holds a database is refused.
 */
export async function restoreBackup(from: string, dataDir: string): Promise<BackupHeader> {
  let file: Buffer;
  try {
    file = await readFile(from);
  } catch (err) {
    throw new UserError(`--from ${from}: cannot read the backup (${errorMessage(err)})`);
  }
  const { header, body } = decodeBackup(file, from);
  await prepareDataDir(dataDir);
  const pgDir = `${dataDir}/pg`;
  const existing = await readdir(pgDir).catch(() => [] as string[]);
  if (existing.length)
    throw new UserError(
      `--data-dir ${dataDir}: it already holds a database (${pgDir}); restore into a new, empty data dir`,
    );
  await mkdir(pgDir, { recursive: true, mode: 0o700 });
  const pglite = new PGlite(pgDir, { loadDataDir: new Blob([body]) });
  try {
    await pglite.waitReady;
    await pglite.query('select 1');
  } finally {
    await pglite.close();
  }
  await tightenModes(dataDir);
  return header;
}
