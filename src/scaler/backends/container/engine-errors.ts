/** Engine API failures, classified for the manager's backoff and the operator's timeline. */
import { SpawnError } from '../../core/spawn-errors.js';
import { errorMessage } from '../../../util/errors.js';

export function statusOf(err: unknown): number | undefined {
  const s = (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof s === 'number' ? s : undefined;
}

const UNREACHABLE = new Set(['ECONNREFUSED', 'ENOENT', 'ECONNRESET', 'EPIPE', 'EHOSTUNREACH', 'ETIMEDOUT']);

/** The engine itself could not be talked to (socket gone, daemon stopped): retry with backoff. */
export function engineUnreachable(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && UNREACHABLE.has(code);
}

export function classifyEngineError(err: unknown, where: string, what: string): SpawnError {
  if (err instanceof SpawnError) return err;
  if (engineUnreachable(err))
    return new SpawnError(
      'engine-unavailable',
      `container engine at ${where} is not reachable while ${what}: ${errorMessage(err)}; start the engine (or fix socketPath/host) and the spawn is retried`,
      { cause: err },
    );
  return new SpawnError('transient', `container engine refused ${what}: ${errorMessage(err)}`, {
    cause: err,
  });
}
