#!/usr/bin/env node
import './node-check.js';
import { Command, CommanderError } from 'commander';
import { flagProperty, SCALER_SETTINGS } from '../config/scaler-settings.js';
import { UsageError } from '../util/errors.js';
import { packageVersion } from '../version.js';
import { exitWhenFlushed } from './exit.js';

// `serve` and `demo` load the whole server; they are imported when their command runs, so
// `--version` and `--help` answer at once.

const program = new Command('kici-orchestrator')
  .description('The kici orchestrator: job queue, agent protocol and autoscaler')
  .version(packageVersion())
  .exitOverride();

const serveCommand = program
  .command('serve')
  .description('run the orchestrator')
  .option('--config <file>', 'scaler config (default: $KICI_SCALER_CONFIG_PATH; none = no autoscaling)')
  .option('--config-dir <dir>', 'scalers.d drop-in directory (default: $KICI_SCALER_CONFIG_DIR)')
  .option(
    '--machine-ledger-dir <dir>',
    "machine pools' shared ledger, the same for every orchestrator on this host (default: $KICI_MACHINE_LEDGER_DIR, else chosen automatically)",
  )
  .option(
    '--orchestrator-url <url>',
    "ws:// or wss:// URL agents dial when a scaler entry sets none (default: $KICI_ORCHESTRATOR_URL, else this server's /ws)",
  )
  .option('--listen <host:port>', 'where to listen (default: $KICI_LISTEN or 127.0.0.1:8080)')
  .option(
    '--data-dir <dir>',
    'embedded database and admin token (default: $KICI_DATA_DIR, else /var/lib/kici for root, $XDG_STATE_HOME/kici or ~/.local/state/kici otherwise)',
  )
  .option(
    '--admin-token-file <file>',
    'where the bootstrap admin token is written, outside the data dir (default: $KICI_ADMIN_TOKEN_FILE, else /etc/kici/admin-token for root, else $XDG_CONFIG_HOME/kici/admin-token)',
  )
  .option(
    '--metrics-public',
    '/metrics answers without a viewer token (default: $KICI_METRICS_PUBLIC or false)',
  )
  .option(
    '--tls-cert <file>',
    'serve HTTPS and WSS with this PEM certificate chain, re-read on SIGHUP (default: $KICI_TLS_CERT)',
  )
  .option('--tls-key <file>', 'the PEM private key for --tls-cert (default: $KICI_TLS_KEY)')
  .option('--database-url <url>', 'external PostgreSQL (default: $KICI_DATABASE_URL)')
  .option(
    '--instance-id <id>',
    'this instance in a cluster (default: $KICI_INSTANCE_ID, else kept in the data dir)',
  )
  .option(
    '--drain-timeout <seconds>',
    'on SIGTERM/SIGINT, how long running jobs may finish before the server stops and leaves them to the next start (default: $KICI_DRAIN_TIMEOUT or 60)',
  )
  .option(
    '--log-format <json|text>',
    'log lines as JSON for pipelines or text for people (default: $KICI_LOG_FORMAT or json)',
  )
  .option(
    '--retain-jobs <duration>',
    'keep finished jobs and their logs this long (default: $KICI_RETAIN_JOBS or 30d; off = forever)',
  )
  .option(
    '--retain-events <duration>',
    'settled scale-event deliveries and reload records (default: $KICI_RETAIN_EVENTS or 14d)',
  )
  .option('--retain-audit <duration>', 'audit rows (default: $KICI_RETAIN_AUDIT or 365d)')
  .option(
    '--retain-tokens <duration>',
    'tokens and claim codes after expiry, use or revocation (default: $KICI_RETAIN_TOKENS or 7d)',
  )
  .option(
    '--retain-spawns <duration>',
    'spawn outcomes and agents gone this long (default: $KICI_RETAIN_SPAWNS or 7d)',
  )
  .option(
    '--retain-tombstones <duration>',
    'the "pruned" marker of each pruned job (default: $KICI_RETAIN_TOMBSTONES or 365d)',
  )
  .option(
    '--prune-interval <duration>',
    'how often the leader prunes (default: $KICI_PRUNE_INTERVAL or 10m)',
  );
for (const spec of SCALER_SETTINGS)
  serveCommand.option(
    `--${spec.flag} <${spec.unit === 'failures' ? 'n' : 'ms'}>`,
    `${spec.describe} (default: $${spec.env} or ${spec.defaultValue}; at least ${spec.min})`,
  );
serveCommand.action(
  async (
    o: {
      config?: string;
      configDir?: string;
      machineLedgerDir?: string;
      orchestratorUrl?: string;
      listen?: string;
      dataDir?: string;
      databaseUrl?: string;
      drainTimeout?: string;
      instanceId?: string;
      adminTokenFile?: string;
      logFormat?: string;
      metricsPublic?: boolean;
      tlsCert?: string;
      tlsKey?: string;
      retainJobs?: string;
      retainEvents?: string;
      retainAudit?: string;
      retainTokens?: string;
      retainSpawns?: string;
      retainTombstones?: string;
      pruneInterval?: string;
    } & Record<string, unknown>,
  ) => {
    const { serve } = await import('./serve.js');
    const settingFlags: Record<string, string | undefined> = {};
    for (const spec of SCALER_SETTINGS) {
      const v = o[flagProperty(spec.flag)];
      if (typeof v === 'string') settingFlags[flagProperty(spec.flag)] = v;
    }
    process.exitCode = await serve({
      ...o,
      settingFlags,
      retention: {
        jobsMs: o.retainJobs,
        eventsMs: o.retainEvents,
        auditMs: o.retainAudit,
        tokensMs: o.retainTokens,
        spawnsMs: o.retainSpawns,
        tombstonesMs: o.retainTombstones,
        intervalMs: o.pruneInterval,
      },
    });
  },
);

program
  .command('restore')
  .description('unpack a backup from `kici-admin backup` as the embedded database of a new data dir')
  .requiredOption('--from <file>', 'the backup file (its checksum is verified first)')
  .requiredOption('--data-dir <dir>', 'the new data dir (must not hold a database yet)')
  .action(async (o: { from: string; dataDir: string }) => {
    const { restoreBackup } = await import('../store/backup.js');
    const h = await restoreBackup(o.from, o.dataDir);
    process.stdout.write(
      `restored the backup taken ${h.createdAt} (version ${h.version}) into ${o.dataDir}; start it with: kici-orchestrator serve --data-dir ${o.dataDir}\n`,
    );
  });

program
  .command('demo')
  .description('run the main job on embedded defaults: a burst of jobs on autoscaled bare-metal agents')
  .option('--jobs <n>', 'how many jobs', '24')
  .option('--data-dir <dir>', 'keep the demo database here instead of a temp dir')
  .option('--config <file>', 'scaler config (default: examples/demo-scalers.yaml)')
  .action(async (o: { jobs: string; dataDir?: string; config?: string }) => {
    const jobs = Number(o.jobs);
    if (!Number.isInteger(jobs) || jobs < 1 || jobs > 10_000)
      throw new UsageError('--jobs: a whole number from 1 to 10000');
    const { demo } = await import('./demo.js');
    process.exitCode = await demo({
      jobs,
      ...(o.dataDir ? { dataDir: o.dataDir } : {}),
      ...(o.config ? { config: o.config } : {}),
    });
  });

program.parseAsync(process.argv).then(
  () => exitWhenFlushed(typeof process.exitCode === 'number' ? process.exitCode : 0),
  (err: unknown) => {
    if (err instanceof CommanderError) return exitWhenFlushed(err.exitCode === 0 ? 0 : 2);
    process.stderr.write(`Error: ${(err as Error).message}\n`);
    return exitWhenFlushed(err instanceof UsageError ? 2 : 1);
  },
);
