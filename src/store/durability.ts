import { fdatasyncSync } from 'node:fs';
import { UserError } from '../util/errors.js';
import { SyncGate } from './sync-gate.js';

/**
 * Whether the embedded database makes each commit reach stable storage before it returns.
 * `on` (the default): a stored result survives a power loss. `off`: commits return once written
 * to the page cache, faster, and a power loss can lose the last seconds of results.
 */
export type DataSync = 'on' | 'off';

/** KICI_DATA_SYNC: `on` (default) or `off`. */
export function dataSyncFromEnv(env: NodeJS.ProcessEnv = process.env): DataSync {
  const raw = env.KICI_DATA_SYNC?.trim();
  if (raw === undefined || raw === '') return 'on';
  if (raw === 'on' || raw === 'off') return raw;
  throw new UserError(`KICI_DATA_SYNC: expected "on" or "off", got "${raw}"`);
}

/**
 * The embedded database runs as one backend without a checkpointer, and such a backend never
 * starts a checkpoint on its own, whatever max_wal_size says: the orchestrator runs them (see
 * wal-keeper.ts). min_wal_size is what a checkpoint keeps of the old log as two recycled segments,
 * so the log seldom needs a new 16 MiB file; max_wal_size caps what it keeps beyond that.
 */
const WAL_BOUNDS = ['-c', 'max_wal_size=64MB', '-c', 'min_wal_size=32MB'];

/**
 * The embedded database's start-up flags for a sync mode. Its defaults include `-F` (no sync at
 * all); `on` drops it and has the log flushed with fsync(), the one sync call that reaches the
 * file layer's hook (the other, fdatasync(), ends in a stub that does nothing).
 */
export function startParamsFor(defaults: readonly string[], mode: DataSync): string[] {
  if (mode === 'off') return [...defaults, ...WAL_BOUNDS];
  return [
    ...defaults.filter((p) => p !== '-F'),
    ...WAL_BOUNDS,
    '-c',
    'fsync=on',
    '-c',
    'wal_sync_method=fsync',
    '-c',
    'synchronous_commit=on',
  ];
}

/** The part of the database's file layer the hooks need. */
export interface NodeFileLayer {
  NODEFS: {
    stream_ops: Record<string, unknown>;
    tryFSOperation<T>(f: () => T): T;
  };
}

type Stream = { nfd?: number };

/**
 * Give the database's on-disk file layer the sync it lacks: a sync of an open file becomes
 * fdatasync(2) of the real descriptor (enough for the log, whose segments are written at full
 * size, and for data files, whose size change it carries too), through `gate`, which may hold it
 * back for a moment (sync-gate.ts). A file is closed only once a sync held for it is done. A
 * failure reaches the database as an I/O error, which it treats as fatal rather than carry on with
 * data it cannot trust.
 */
export function installFileSync(
  layer: NodeFileLayer,
  gate: SyncGate = new SyncGate(fdatasyncSync),
): SyncGate {
  const fsLayer = layer.NODEFS;
  const ops = fsLayer.stream_ops;
  ops.fsync = (stream: Stream) => {
    if (typeof stream.nfd !== 'number') return 0;
    fsLayer.tryFSOperation(() => gate.onSync(stream.nfd as number));
    return 0;
  };
  const close = ops.close as (this: unknown, stream: Stream) => unknown;
  ops.close = function (this: unknown, stream: Stream) {
    if (typeof stream.nfd === 'number') fsLayer.tryFSOperation(() => gate.onClose(stream.nfd as number));
    return close.call(this, stream);
  };
  return gate;
}
