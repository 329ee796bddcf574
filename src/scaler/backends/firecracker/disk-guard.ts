import { statfs as fsStatfs } from 'node:fs/promises';
import { DEFAULT_JAILER_CHROOT_BASE_DIR, type ScalerConfig } from '../../../config/index.js';
import { SpawnError } from '../../core/spawn-errors.js';
import type { SpawnContext } from '../../types.js';

/** Below this much free space under the VM directory, stale VM artifacts are reaped first. */
export const DEFAULT_DISK_GUARD_THRESHOLD_BYTES = 1024 * 1024 * 1024;

/** The two statfs fields the guard reads (numbers or bigints, as node returns either). */
export type StatfsFn = (path: string) => Promise<{ bavail: number | bigint; bsize: number | bigint }>;

export interface ReapCounts {
  /** Artifacts removed (VM directories, TAPs, leases, rule sets). */
  reaped: number;
}

/** `scalerConfig` and `statfsFn` are the public names; `config` and `statfs` are older ones. */
export interface DiskGuardOpts {
  scalerConfig?: ScalerConfig | undefined;
  /** Older name of scalerConfig. */
  config?: ScalerConfig | undefined;
  thresholdBytes?: number | undefined;
  statfsFn?: StatfsFn | undefined;
  /** Older name of statfsFn. */
  statfs?: StatfsFn | undefined;
  /** Removes artifacts of VMs that no longer exist; the default runs each VM scaler's orphan sweep. */
  reapFn?: (cfg: ScalerConfig) => Promise<ReapCounts>;
  /** Where the guard reports; stderr by default, since a full disk may stop the file logger. */
  write?: (line: string) => void;
}

export interface DiskGuardResult {
  reaped: boolean;
  recovered: boolean;
  freeBytesAfter: number;
}

export async function freeBytes(statfs: StatfsFn, path: string): Promise<number> {
  const s = await statfs(path);
  return Number(s.bavail) * Number(s.bsize);
}

/**
 * One volume: measure, and when short, reap and measure again. Shared by start-up (runDiskGuard)
 * and by the backend before each spawn.
 */
export async function guardVolume(opts: {
  volume: string;
  thresholdBytes: number;
  statfs: StatfsFn;
  reap: () => Promise<number>;
  write: (line: string) => void;
}): Promise<DiskGuardResult> {
  const before = await freeBytes(opts.statfs, opts.volume);
  if (before >= opts.thresholdBytes) return { reaped: false, recovered: true, freeBytesAfter: before };
  opts.write(
    `disk guard: ${before} bytes free under ${opts.volume}, below the ${opts.thresholdBytes}-byte threshold; reaping stale VM artifacts`,
  );
  const count = await opts.reap();
  const after = await freeBytes(opts.statfs, opts.volume);
  opts.write(`disk guard: reaped ${count} stale VM artifacts; ${after} bytes free under ${opts.volume} now`);
  return { reaped: true, recovered: after >= opts.thresholdBytes, freeBytesAfter: after };
}

/** The scaler config the guard reads, under either of its names. */
export function guardedConfig(opts: Pick<DiskGuardOpts, 'scalerConfig' | 'config'>): ScalerConfig {
  const config = opts.scalerConfig ?? opts.config;
  if (!config) throw new TypeError('runDiskGuard: pass the loaded scaler config as scalerConfig');
  return config;
}

/**
 * Start-up check: a VM host whose disk is full would crash-loop before any in-process cleanup runs.
 * The guard never exits; the caller decides (refuse to start, after its backoff). No VM scaler: a
 * no-op.
 */
export async function runDiskGuard(opts: DiskGuardOpts): Promise<DiskGuardResult> {
  const config = guardedConfig(opts);
  const vmScalers = config.scalers.filter((s) => s.type === 'firecracker');
  const first = vmScalers[0];
  if (!first) return { reaped: false, recovered: true, freeBytesAfter: Number.MAX_SAFE_INTEGER };
  const reapFn = opts.reapFn;
  if (!reapFn) {
    throw new Error('runDiskGuard needs reapFn (the VM orphan sweep) when the config has VM scalers');
  }
  return guardVolume({
    volume: first.chrootBaseDir || DEFAULT_JAILER_CHROOT_BASE_DIR,
    thresholdBytes: opts.thresholdBytes ?? DEFAULT_DISK_GUARD_THRESHOLD_BYTES,
    statfs: opts.statfsFn ?? opts.statfs ?? fsStatfs,
    reap: async () => (await reapFn(config)).reaped,
    write: opts.write ?? ((line) => process.stderr.write(line + '\n')),
  });
}

/**
 * Before a spawn: when the VM volume is short even after reaping dead VMs' leftovers, the reason
 * the spawn is refused (for the waiting job); undefined when there is room.
 */
export async function diskShortMessage(
  volume: string,
  disk: { thresholdBytes: number; statfs: StatfsFn },
  reap: () => Promise<number>,
  log: { warn(msg: string): void },
): Promise<string | undefined> {
  const res = await guardVolume({ volume, ...disk, reap, write: (line) => log.warn(line) });
  if (res.recovered) return undefined;
  return `not enough disk space for a VM under ${volume}: ${res.freeBytesAfter} bytes free after reaping stale VM artifacts, ${disk.thresholdBytes} needed; free space or run kici-admin scaler reap-orphans`;
}

/** Refuse a spawn that would fill the disk; the reason reaches the waiting job via scaler.failed. */
export async function refuseIfDiskShort(
  ctx: Pick<SpawnContext, 'onEvent'>,
  ...args: Parameters<typeof diskShortMessage>
): Promise<void> {
  const message = await diskShortMessage(...args);
  if (!message) return;
  ctx.onEvent('scaler.failed', message);
  throw new SpawnError('capacity', message);
}
