import { DeterministicSpawnError } from '../../core/spawn-errors.js';

/** The classified failure for an agent binary that could not be started, naming the path and why. */
export function launchError(binary: string, err: unknown): DeterministicSpawnError {
  const e = err as NodeJS.ErrnoException;
  const kind =
    e.code === 'ENOENT'
      ? 'binary-missing'
      : e.code === 'EACCES' || e.code === 'EISDIR'
        ? 'not-executable'
        : 'unknown';
  const what =
    e.code === 'EISDIR'
      ? 'is a directory, not an executable file'
      : kind === 'binary-missing'
        ? 'does not exist'
        : kind === 'not-executable'
          ? 'is not executable'
          : `could not start (${e.message})`;
  return new DeterministicSpawnError(kind, `agent binary ${binary} ${what}`, { cause: err });
}
