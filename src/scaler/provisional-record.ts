import { errorMessage } from '../util/errors.js';
import type { ManagedEntry } from './agent-book.js';
import type { SpawnHost } from './lifecycle-port.js';

/**
 * The spawn record of a provisional launch (BackendCapabilities.provisionalLaunch): written once,
 * when the backend asks (SpawnContext.record) or a registration does, whichever comes first. A
 * write that fails tears the spawn down (the backend stops what it started); a spawn withdrawn
 * before the ask gets no record, since its teardown deleted none and none may appear after it.
 */
export function recordWhenAsked(
  host: SpawnHost,
  m: ManagedEntry,
  write: () => Promise<void>,
): () => Promise<void> {
  let written: Promise<void> | undefined;
  const record = (): Promise<void> =>
    (written ??=
      host.state.agents.get(m.agentId) !== m
        ? Promise.reject(new Error('the spawn was withdrawn before its record was written'))
        : write().then(
            () => {
              if (m.record === record) m.record = undefined;
            },
            (err: unknown) => {
              host.log.error(
                { err: errorMessage(err), agentId: m.agentId },
                'could not record a spawn; stopping its start',
              );
              // The teardown drops the kept token first.
              void host.teardown(m, 'spawn-failed');
              throw err;
            },
          ));
  return record;
}
