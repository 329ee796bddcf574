/**
 * `kici-admin scaler reap-orphans` and `scaler orphans`. With a healthy orchestrator (and no
 * `--force`) the orchestrator sweeps, through its API. Otherwise, as when a full data disk keeps it
 * from starting, this command builds each scaler's sweeper from the scaler config and sweeps here:
 * no store, no token, no write to the data dir.
 */
import type { Command } from 'commander';
import { loadScalerConfigForPeople } from '../../config/index.js';
import { NftAgentIsolation } from '../../net/nft-isolation.js';
import { createNftRunner } from '../../net/nft-runner.js';
import { connectEngine } from '../../scaler/backends/engine-client.js';
import { sweepOffline, type OfflineSweepReport, type OrphanSweepReport } from '../../scaler/offline-sweep.js';
import { UsageError, UserError } from '../../util/errors.js';
import { createLogger } from '../../util/logger.js';
import { printJson, table } from '../output.js';
import { adminBaseUrl, type AdminClient } from './client.js';
import { probeHealth } from './health-probe.js';

interface OrphanOptions {
  dryRun?: boolean;
  force?: boolean;
  json?: boolean;
  config?: string;
  configDir?: string;
}

type Report = OrphanSweepReport & Partial<OfflineSweepReport> & { offline?: { reason: string } };

export function registerOrphanCommands(scaler: Command, client: (c: Command) => Promise<AdminClient>): void {
  const withConfig = (c: Command) =>
    c
      .option(
        '--config <scalers.yaml>',
        'scaler config, read when sweeping here (default: $KICI_SCALER_CONFIG_PATH)',
      )
      .option('--config-dir <scalers.d>', 'its drop-in directory (default: $KICI_SCALER_CONFIG_DIR)')
      .option('--force', 'sweep here from host-local evidence even when the orchestrator is healthy')
      .option('--json', 'machine-readable output');
  withConfig(
    scaler
      .command('reap-orphans')
      .description(
        'remove agent compute and firewall rules no live agent owns (left by a crash); works with the orchestrator stopped',
      )
      .option('--dry-run', 'list what would be removed, remove nothing'),
  ).action((o: OrphanOptions, cmd: Command) => run(o, cmd, client));
  withConfig(
    scaler.command('orphans').description('list what reap-orphans would remove; removes nothing'),
  ).action((o: OrphanOptions, cmd: Command) => run({ ...o, dryRun: true }, cmd, client));
}

async function run(o: OrphanOptions, cmd: Command, client: (c: Command) => Promise<AdminClient>) {
  if (o.config === '') throw new UsageError('--config: the path of the scaler config (scalers.yaml)');
  if (o.configDir === '') throw new UsageError('--config-dir: the path of a scalers.d directory');
  const dryRun = o.dryRun === true;
  let reason = 'asked with --force';
  if (!o.force) {
    const base = adminBaseUrl(cmd.optsWithGlobals<{ server?: string }>().server);
    const health = await probeHealth(base);
    if (health.healthy) {
      const r = await (
        await client(cmd)
      ).request<OrphanSweepReport>('POST', `/api/v1/scaler/reap-orphans?dryRun=${dryRun ? 'true' : 'false'}`);
      return render(r, o.json);
    }
    reason = health.reason;
  }
  const configPath = o.config ?? process.env.KICI_SCALER_CONFIG_PATH;
  if (!configPath)
    throw new UsageError(
      `the orchestrator is not swept through its API (${reason}), so this host is swept here, which needs the scaler config: pass --config <scalers.yaml> or set KICI_SCALER_CONFIG_PATH`,
    );
  const loaded = await loadScalerConfigForPeople(
    configPath,
    o.configDir ?? process.env.KICI_SCALER_CONFIG_DIR,
  );
  if (!loaded.ok) throw new UserError(`${configPath}: invalid scaler config`, loaded.problems);
  const report = await sweepOffline(
    loaded.config,
    {
      // Only what goes wrong reaches stderr; the report is the command's output.
      logger: createLogger({ level: 'warn', format: 'text', destination: process.stderr }),
      configPath,
      hostEnv: process.env,
      vmNetwork: loaded.config.firecracker,
      connectEngine: (entry) => connectEngine(entry, process.env),
      // The table serve uses, and nft run as serve runs it (the runner's own minimal environment);
      // only scalers with isolation on reach it.
      isolation: new NftAgentIsolation({ runner: createNftRunner() }),
    },
    dryRun,
  );
  render({ ...report, offline: { reason } }, o.json);
}

function render(r: Report, json: boolean | undefined): void {
  if (r.errors.length) process.exitCode = 1;
  if (json) return printJson(r);
  const out = (s: string) => process.stdout.write(s);
  if (r.offline) out(`swept on this host without the orchestrator (${r.offline.reason})\n`);
  if (!r.items.length) out(`no orphans (${r.dryRun ? 'dry run' : 'nothing removed'})\n`);
  else {
    out(`${r.dryRun ? 'would remove' : 'removed'} ${r.items.length}:\n`);
    out(
      table(
        ['SCALER', 'AGENT', 'REF', 'REASON'],
        r.items.map((i) => [i.scaler, i.agentId ?? '-', i.ref, i.reason]),
      ) + '\n',
    );
  }
  for (const s of r.skipped ?? []) out(`${s.scaler}: not swept: ${s.reason}\n`);
  for (const e of r.errors) out(`${e.scaler}: sweep failed: ${e.message}\n`);
}
