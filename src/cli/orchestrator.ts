#!/usr/bin/env node
import { Command, CommanderError } from 'commander';
import { UserError } from '../util/errors.js';
import { packageVersion } from '../version.js';

// `serve` and `demo` load the whole server; they are imported when their command runs, so
// `--version` and `--help` answer at once.

const program = new Command('kici-orchestrator')
  .description('The kici orchestrator: job queue, agent protocol and autoscaler')
  .version(packageVersion())
  .exitOverride();

program
  .command('serve')
  .description('run the orchestrator')
  .option('--config <file>', 'scaler config (default: $KICI_SCALER_CONFIG_PATH; none = no autoscaling)')
  .option('--config-dir <dir>', 'scalers.d drop-in directory (default: $KICI_SCALER_CONFIG_DIR)')
  .option('--listen <host:port>', 'where to listen (default: $KICI_LISTEN or 127.0.0.1:8080)')
  .option('--data-dir <dir>', 'embedded database and admin token (default: $KICI_DATA_DIR or ./.kici-data)')
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
  .action(
    async (o: {
      config?: string;
      configDir?: string;
      listen?: string;
      dataDir?: string;
      databaseUrl?: string;
      drainTimeout?: string;
      instanceId?: string;
      logFormat?: string;
    }) => {
      const { serve } = await import('./serve.js');
      process.exitCode = await serve(o);
    },
  );

program
  .command('demo')
  .description('run the main job on embedded defaults: a burst of jobs on autoscaled bare-metal agents')
  .option('--jobs <n>', 'how many jobs', '24')
  .option('--data-dir <dir>', 'keep the demo database here instead of a temp dir')
  .option('--config <file>', 'scaler config (default: examples/demo-scalers.yaml)')
  .action(async (o: { jobs: string; dataDir?: string; config?: string }) => {
    const jobs = Number(o.jobs);
    if (!Number.isInteger(jobs) || jobs < 1 || jobs > 10_000)
      throw new UserError('--jobs: a whole number from 1 to 10000');
    const { demo } = await import('./demo.js');
    process.exitCode = await demo({
      jobs,
      ...(o.dataDir ? { dataDir: o.dataDir } : {}),
      ...(o.config ? { config: o.config } : {}),
    });
  });

program.parseAsync(process.argv).then(
  () => process.exit(process.exitCode ?? 0),
  (err: unknown) => {
    if (err instanceof CommanderError) process.exit(err.exitCode === 0 ? 0 : 2);
    process.stderr.write(`Error: ${(err as Error).message}\n`);
    process.exit(1);
  },
);
