import { randomBytes } from 'node:crypto';
import { open, readFile, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { z } from 'zod';

/**
 * On-disk format of one machine pool: `<dir>/<pool>.json` =
 * `{version: 1, cap: {maxCpu, maxMemoryBytes}, reservations: [...]}`. An unlimited cap dimension is
 * written as `null`; a missing or `null` dimension reads back as unlimited.
 */

export interface PoolCap {
  maxCpu?: number;
  maxMemoryBytes?: number;
}

export interface LedgerReservation {
  instanceId: string;
  pid: number;
  bootId: string;
  agentId: string;
  cpus: number;
  memBytes: number;
  /** Epoch ms. */
  reservedAt: number;
}

export interface LedgerFileData {
  cap: PoolCap;
  reservations: LedgerReservation[];
}

export const LEDGER_VERSION = 1;

export type LedgerErrorCode =
  'cap-mismatch' | 'unknown-version' | 'corrupt' | 'unregistered-pool' | 'invalid';

export class LedgerError extends Error {
  override readonly name = 'LedgerError';
  readonly code: LedgerErrorCode;

  constructor(code: LedgerErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** Pool names come from config verbatim; encoding keeps `/`, spaces and the like out of paths. */
export function poolFileName(pool: string): string {
  return encodeURIComponent(pool);
}

export function poolFilePath(dir: string, pool: string): string {
  return join(dir, `${poolFileName(pool)}.json`);
}

const capDim = z.number().nonnegative().nullish();
const fileSchema = z.object({
  version: z.literal(LEDGER_VERSION),
  cap: z.object({ maxCpu: capDim, maxMemoryBytes: capDim }),
  reservations: z.array(
    z.object({
      instanceId: z.string().min(1),
      pid: z.number().int().positive(),
      bootId: z.string(),
      agentId: z.string().min(1),
      cpus: z.number().nonnegative(),
      memBytes: z.number().nonnegative(),
      reservedAt: z.number(),
    }),
  ),
});

export function normalizeCap(cap: { maxCpu?: number | null; maxMemoryBytes?: number | null }): PoolCap {
  const out: PoolCap = {};
  if (cap.maxCpu !== undefined && cap.maxCpu !== null) out.maxCpu = cap.maxCpu;
  if (cap.maxMemoryBytes !== undefined && cap.maxMemoryBytes !== null)
    out.maxMemoryBytes = cap.maxMemoryBytes;
  return out;
}

/** Normalise a configured cap and refuse negative or non-numeric dimensions. */
export function validateCap(pool: string, cap: PoolCap): PoolCap {
  if (!pool) throw new LedgerError('invalid', 'machine pool name must not be empty');
  const out = normalizeCap(cap);
  for (const [what, v] of Object.entries(out)) {
    if (!(typeof v === 'number' && Number.isFinite(v) && v >= 0)) {
      throw new LedgerError('invalid', `machine pool "${pool}": ${what} must be a number >= 0, got ${v}`);
    }
  }
  return out;
}

export function sameCap(a: PoolCap, b: PoolCap): boolean {
  return a.maxCpu === b.maxCpu && a.maxMemoryBytes === b.maxMemoryBytes;
}

export function describeCap(cap: PoolCap): string {
  const cpu = cap.maxCpu === undefined ? 'unlimited' : String(cap.maxCpu);
  const mem = cap.maxMemoryBytes === undefined ? 'unlimited' : `${cap.maxMemoryBytes} bytes`;
  return `{cpu: ${cpu}, memory: ${mem}}`;
}

const REMEDY = 'remove it when no orchestrator on this host is running';

/** Read a pool file; `undefined` when it does not exist yet. */
export async function readLedgerFile(path: string): Promise<LedgerFileData | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as { code?: string }).code === 'ENOENT') return undefined;
    throw err;
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new LedgerError('corrupt', `machine-pool ledger ${path} is not valid JSON; ${REMEDY}`, {
      cause: err,
    });
  }
  const version = (raw as { version?: unknown } | null)?.version;
  if (version !== LEDGER_VERSION) {
    throw new LedgerError(
      'unknown-version',
      `machine-pool ledger ${path} has version ${JSON.stringify(version)}, expected ${LEDGER_VERSION}; ` +
        `it was written by another orchestrator release`,
    );
  }
  const parsed = fileSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue ? `${issue.path.join('.')}: ${issue.message}` : 'invalid shape';
    throw new LedgerError('corrupt', `machine-pool ledger ${path} is malformed (${where}); ${REMEDY}`);
  }
  return { cap: normalizeCap(parsed.data.cap), reservations: parsed.data.reservations };
}

/**
 * Replace the file atomically: readers (who do not take the lock) see the old or the new
 * content, never a torn write. The temp file is synced first so a crash cannot leave an empty
 * file under the final name.
 */
export async function writeLedgerFile(path: string, data: LedgerFileData): Promise<void> {
  const body = {
    version: LEDGER_VERSION,
    cap: { maxCpu: data.cap.maxCpu ?? null, maxMemoryBytes: data.cap.maxMemoryBytes ?? null },
    reservations: data.reservations,
  };
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  try {
    const fh = await open(tmp, 'wx');
    try {
      await fh.writeFile(`${JSON.stringify(body, null, 2)}\n`, 'utf8');
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}
