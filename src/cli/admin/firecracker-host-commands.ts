/**
 * `kici-admin firecracker verify | provision | teardown`: the host set-up of the micro-VM scalers,
 * done on this host from the scaler config (no orchestrator needed). What provision made is recorded
 * in the data dir, so that teardown removes exactly that.
 */
import { constants } from 'node:fs';
import { access, mkdir, readFile, rm, rmdir, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Command } from 'commander';
import {
  firecrackerNetworkSchema,
  loadScalerConfigForPeople,
  type ScalerConfig,
} from '../../config/index.js';
import {
  hostTools,
  provisionHost,
  teardownHost,
  verifyHost,
  type HostPorts,
  type HostRow,
  type ProvisionRecord,
  type VmHostNeeds,
} from '../../scaler/backends/registry.js';
import { resolveDataDir } from '../../util/default-data-dir.js';
import { UsageError, UserError } from '../../util/errors.js';
import { printJson, table } from '../output.js';

interface HostOptions {
  config?: string;
  configDir?: string;
  record?: string;
  json?: boolean;
}

const MODE = { r: constants.R_OK, rw: constants.R_OK | constants.W_OK, x: constants.X_OK } as const;

export function realHostPorts(sudo: boolean, hostEnv: NodeJS.ProcessEnv = process.env): HostPorts {
  return {
    ...hostTools(sudo, hostEnv),
    fs: {
      access: (p, mode) =>
        access(p, MODE[mode]).then(
          () => true,
          () => false,
        ),
      isDir: (p) =>
        stat(p).then(
          (s) => s.isDirectory(),
          () => false,
        ),
      // Absent: no record of a provision (or no forwarding switch), which the callers report as
      // such. A file that is there but cannot be read (another user's record, a directory) is not
      // "nothing was provisioned": teardown would forget what provision made, so it is refused.
      readText: (p) =>
        readFile(p, 'utf8').catch((err: NodeJS.ErrnoException) => {
          if (err.code === 'ENOENT') return undefined;
          throw new UserError(`cannot read ${p}: ${err.message}`);
        }),
      writeText: async (p, text) => {
        await mkdir(dirname(p), { recursive: true, mode: 0o700 });
        await writeFile(p, text, { mode: 0o600 });
      },
      remove: (p) => rm(p, { force: true }),
      mkdirp: async (p) => (await mkdir(p, { recursive: true, mode: 0o755 })) !== undefined,
      rmdirIfEmpty: (p) =>
        rmdir(p).then(
          () => true,
          (err: NodeJS.ErrnoException) => (err.code === 'ENOENT' ? true : false),
        ),
    },
  };
}

/** Each VM scaler's needs, from its entry. */
export function needsOf(config: ScalerConfig): VmHostNeeds[] {
  return config.scalers
    .filter((e) => e.type === 'firecracker')
    .map((e) => ({
      scaler: e.name,
      vmm: e.vmm,
      binaries:
        e.vmm === 'qemu'
          ? []
          : [
              { what: 'firecracker', path: e.firecrackerPath },
              { what: 'jailer', path: e.jailerPath },
            ],
      kernelPath: e.kernelPath,
      chrootBaseDir: e.chrootBaseDir,
    }));
}

async function load(o: HostOptions): Promise<{ config: ScalerConfig; path: string }> {
  if (o.config === '') throw new UsageError('--config: the path of the scaler config (scalers.yaml)');
  if (o.record === '') throw new UsageError('--record: the path of the provision record');
  const path = o.config ?? process.env.KICI_SCALER_CONFIG_PATH;
  if (!path)
    throw new UsageError(
      'the host set-up comes from the scaler config: pass --config <scalers.yaml> or set KICI_SCALER_CONFIG_PATH',
    );
  const loaded = await loadScalerConfigForPeople(path, o.configDir ?? process.env.KICI_SCALER_CONFIG_DIR);
  if (!loaded.ok) throw new UserError(`${path}: invalid scaler config`, loaded.problems);
  if (!needsOf(loaded.config).length)
    throw new UserError(`${path}: no scaler of type firecracker, so this host needs no VM set-up`);
  return { config: loaded.config, path };
}

const recordPath = (o: HostOptions, cmd: Command) =>
  o.record ??
  join(resolveDataDir(cmd.optsWithGlobals<{ dataDir?: string }>().dataDir), 'firecracker-host.json');

async function readRecord(ports: HostPorts, path: string): Promise<ProvisionRecord> {
  const text = await ports.fs.readText(path);
  if (text === undefined) return {};
  try {
    return JSON.parse(text) as ProvisionRecord;
  } catch {
    throw new UserError(
      `${path}: not a provision record (invalid JSON); remove it if nothing was provisioned`,
    );
  }
}

export function renderRows(rows: readonly HostRow[]): string {
  return table(
    ['STATUS', 'CHECK', 'MESSAGE', 'FIX'],
    rows.map((r) => [r.status, r.name, r.message, r.fix ?? '']),
  );
}

function setup(o: HostOptions, config: ScalerConfig) {
  const sudo = config.scalers.some((e) => e.type === 'firecracker' && e.requireSudo);
  return {
    ports: realHostPorts(sudo),
    network: config.firecracker ?? firecrackerNetworkSchema.parse({}),
    needs: needsOf(config),
  };
}

export function registerFirecrackerHostCommands(fc: Command): void {
  const withConfig = (c: Command) =>
    c
      .option('--config <scalers.yaml>', 'scaler config (default: $KICI_SCALER_CONFIG_PATH)')
      .option('--config-dir <scalers.d>', 'its drop-in directory (default: $KICI_SCALER_CONFIG_DIR)')
      .option(
        '--record <file>',
        'where provision records what it made (default: <data dir>/firecracker-host.json)',
      )
      .option('--json', 'machine-readable output');
  withConfig(
    fc.command('verify').description('check the VM host set-up: PASS/WARN/FAIL rows; exit 1 on any FAIL'),
  ).action(async (o: HostOptions) => {
    const { config } = await load(o);
    const s = setup(o, config);
    const rows = await verifyHost(s.ports, s.network, s.needs);
    const ok = !rows.some((r) => r.status === 'FAIL');
    if (!ok) process.exitCode = 1;
    if (o.json) return printJson({ ok, rows });
    process.stdout.write(renderRows(rows) + '\n');
  });
  withConfig(
    fc
      .command('provision')
      .description(
        'make what the VM host set-up lacks (bridge, NAT, forwarding, chroot base); safe to repeat',
      ),
  ).action(async (o: HostOptions, cmd: Command) => {
    const { config } = await load(o);
    const s = setup(o, config);
    const file = recordPath(o, cmd);
    const { record, made } = await provisionHost(
      s.ports,
      s.network,
      s.needs,
      await readRecord(s.ports, file),
    );
    await s.ports.fs.writeText(file, JSON.stringify(record, null, 2) + '\n');
    if (o.json) return printJson({ made, record, recordFile: file });
    process.stdout.write(
      made.length ? `made: ${made.join('; ')}\n` : 'nothing to make: the host is set up\n',
    );
  });
  withConfig(
    fc.command('teardown').description('remove what provision made on this host, and nothing else'),
  ).action(async (o: HostOptions, cmd: Command) => {
    if (o.record === '') throw new UsageError('--record: the path of the provision record');
    const ports = realHostPorts(false);
    const file = recordPath(o, cmd);
    const record = await readRecord(ports, file);
    // The sudo choice comes from the config when there is one; teardown works without it too.
    const path = o.config ?? process.env.KICI_SCALER_CONFIG_PATH;
    const sudo = path
      ? (await load(o)).config.scalers.some((e) => e.type === 'firecracker' && e.requireSudo)
      : false;
    const r = await teardownHost(realHostPorts(sudo), record);
    await ports.fs.remove(file);
    if (o.json) return printJson({ ...r, recordFile: file });
    process.stdout.write(
      r.removed.length
        ? `removed: ${r.removed.join('; ')}\n`
        : 'nothing to remove: provision made nothing here\n',
    );
    for (const k of r.kept) process.stdout.write(`kept: ${k}\n`);
  });
}
