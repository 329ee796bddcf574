/**
 * The start-up checks of what the scalers share on this host rather than of one scaler: the volume
 * under the first VM scaler's chrootBaseDir (the disk guard), the VM bridge, and the machine
 * ledger's directory. Each runs once per config, after the per-scaler checks (startup-checks.ts).
 */
import { statfs as fsStatfs } from 'node:fs/promises';
import { DEFAULT_JAILER_CHROOT_BASE_DIR, type ScalerConfig } from '../config/index.js';
import { errorMessage } from '../util/errors.js';
import { resolveTool } from '../util/system-tools.js';
import { DEFAULT_DISK_GUARD_THRESHOLD_BYTES, freeBytes, vmBridgeExists } from './backends/registry.js';
import { resolveLedgerDir } from './ledger/ledger-dir.js';
import { fileOf, type CheckFinding, type StartupCheckOptions } from './startup-finding.js';

/** The bridge is needed at once when the orchestrator may not create it. */
export const bridgeFindings = async (
  config: ScalerConfig,
  o: StartupCheckOptions,
): Promise<CheckFinding[]> => {
  const i = config.scalers.findIndex((s) => s.type === 'firecracker');
  const net = config.firecracker;
  if (i < 0 || !net || net.autoProvisionHost) return [];
  const entry = config.scalers[i]!;
  const env = o.env ?? process.env;
  if (!resolveTool('ip', env).includes('/')) return [];
  if (await vmBridgeExists(net.bridgeName, entry.requireSudo === true, env)) return [];
  return [
    {
      severity: 'error',
      file: o.configPath,
      path: 'firecracker.bridgeName',
      problem: `bridge ${net.bridgeName} does not exist`,
      fix: 'create it, or set firecracker.autoProvisionHost: true',
    },
  ];
};

/** Start-up measures free space under the first VM scaler's chrootBaseDir before anything else. */
export const diskGuardFindings = async (
  config: ScalerConfig,
  o: StartupCheckOptions,
): Promise<CheckFinding[]> => {
  const i = config.scalers.findIndex((s) => s.type === 'firecracker');
  if (i < 0) return [];
  const entry = config.scalers[i]!;
  const volume = entry.chrootBaseDir || DEFAULT_JAILER_CHROOT_BASE_DIR;
  const at = { file: fileOf(o, i), path: `scalers[${i}].chrootBaseDir` };
  let free: number;
  try {
    free = await freeBytes(o.statfs ?? fsStatfs, volume);
  } catch (err) {
    const missing = (err as NodeJS.ErrnoException).code === 'ENOENT';
    return [
      {
        severity: 'error',
        ...at,
        problem: missing
          ? `scaler "${entry.name}": ${volume} does not exist (VM files and the disk guard live there)`
          : `scaler "${entry.name}": ${volume} cannot be measured (${errorMessage(err)})`,
        fix: `create it (mkdir -p ${volume}) on the volume meant for VM files, or point chrootBaseDir at such a directory`,
      },
    ];
  }
  const threshold = o.diskThresholdBytes ?? DEFAULT_DISK_GUARD_THRESHOLD_BYTES;
  if (free >= threshold) return [];
  return [
    {
      severity: 'warning',
      ...at,
      problem: `scaler "${entry.name}": ${free} bytes free under ${volume}, below ${threshold}; start-up reaps stale VM artifacts and refuses to start if still short`,
      fix: `free space under ${volume}`,
    },
  ];
};

/** An operator-chosen ledger directory must be writable; the fallbacks are tried in turn at start-up. */
export const ledgerFindings = async (
  config: ScalerConfig,
  o: StartupCheckOptions,
): Promise<CheckFinding[]> => {
  const dir = (o.env ?? process.env).KICI_MACHINE_LEDGER_DIR;
  if (!config.machinePools?.length || !dir) return [];
  return resolveLedgerDir({ explicitDir: dir }).then(
    () => [],
    (err: unknown) => [
      {
        severity: 'error' as const,
        file: o.configPath,
        path: 'machinePools',
        problem: errorMessage(err),
        fix: 'make KICI_MACHINE_LEDGER_DIR a directory the orchestrator can write, or unset it',
      },
    ],
  );
};
