/**
 * `kici-admin scaler validate` and `kici-admin scaler schema`: offline commands that need
 * no orchestrator, only the config files.
 */
import { CommanderError, type Command } from 'commander';
import { formatSummary, scalerConfigJsonSchema, summarizeConfig } from '../../config/index.js';
import { UsageError } from '../../util/errors.js';

export interface CommandOutput {
  out(text: string): void;
  err(text: string): void;
}

const processOutput: CommandOutput = {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
};

const EXIT_INVALID = 1;
const EXIT_USAGE = 2;

type ExitCallback = (err: CommanderError) => void;

/** Commander keeps exitOverride callbacks in a private field; read it to defer to the program's choice. */
function ancestorExitCallback(cmd: Command): ExitCallback | undefined {
  for (let c = cmd.parent; c; c = c.parent) {
    const callback = (c as unknown as { _exitCallback?: ExitCallback | null })._exitCallback;
    if (callback) return callback;
  }
  return undefined;
}

/**
 * Usage errors exit 2 instead of commander's 1 (commander has already printed the
 * message). A program that set exitOverride gets the error with exit code 2; otherwise
 * this exits like commander would, with the code changed.
 */
function usageExitFor(cmd: Command): ExitCallback {
  return (err) => {
    const helpOrVersion = ['commander.helpDisplayed', 'commander.help', 'commander.version'].includes(
      err.code,
    );
    const exitCode = helpOrVersion ? err.exitCode : EXIT_USAGE;
    process.exitCode = exitCode;
    ancestorExitCallback(cmd)?.(new CommanderError(exitCode, err.code, err.message));
    process.exit(exitCode);
  };
}

interface ValidateOptions {
  dir?: string;
  json?: boolean;
  /** --config-only: the files alone, as on a machine that is not the orchestrator's host. */
  configOnly?: boolean;
}

async function validate(configPath: string, opts: ValidateOptions, io: CommandOutput): Promise<void> {
  if (!configPath) throw new UsageError('<config>: the path of a scaler config (scalers.yaml)');
  if (opts.dir === '') throw new UsageError('--dir: the path of a scalers.d directory');
  // The checks start-up runs, offline: an engine that is away is only a warning here.
  // Loaded here, not at start-up: the engine and network clients it pulls in would slow every other
  // kici-admin command.
  const { checkScalerConfig } = await import('../../scaler/startup-checks.js');
  const result = await checkScalerConfig(configPath, opts.dir, {
    mode: 'validate',
    env: process.env,
    host: !opts.configOnly,
  });
  const warnings = [...result.warnings, ...result.hostWarnings];
  if (opts.json) {
    const body = result.ok
      ? {
          ok: true,
          config: configPath,
          dir: opts.dir ?? null,
          summary: summarizeConfig(result.config),
          warnings,
        }
      : {
          ok: false,
          config: configPath,
          dir: opts.dir ?? null,
          problems: result.problems,
          ...(warnings.length ? { warnings } : {}),
        };
    io.out(`${JSON.stringify(body, null, 2)}\n`);
  } else if (result.ok) {
    io.out(`${configPath}: valid\n`);
    io.out(`${formatSummary(summarizeConfig(result.config)).join('\n')}\n`);
    for (const w of warnings) io.out(`warning: ${w}\n`);
  } else {
    // The problem list is this command's result, so it goes to stdout like the summary.
    const n = result.problems.length;
    io.out(`${configPath}: invalid, ${n} problem${n === 1 ? '' : 's'}:\n`);
    for (const p of result.problems) io.out(`  ${p}\n`);
    for (const w of warnings) io.out(`warning: ${w}\n`);
  }
  process.exitCode = result.ok ? 0 : EXIT_INVALID;
}

/** Adds `validate` and `schema` to the `kici-admin scaler` command. */
export function registerScalerConfigCommands(scaler: Command, io: CommandOutput = processOutput): void {
  const validateCmd = scaler
    .command('validate')
    .description(
      'check a scaler config (and its scalers.d/) and this host as start-up does, offline; lists every problem',
    )
    .argument('<config>', 'path to scalers.yaml')
    .option('--dir <scalers.d>', 'drop-in directory whose *.yaml/*.yml scalers are appended')
    .option('--json', 'machine-readable output')
    .option('--config-only', 'check the files only, not this host (tools, paths, nft, engine)')
    .action(async (configPath: string, opts: ValidateOptions) => validate(configPath, opts, io));
  validateCmd.exitOverride(usageExitFor(validateCmd));

  const schemaCmd = scaler
    .command('schema')
    .description('print the JSON Schema of scalers.yaml, for editor completion')
    .option('--json', 'accepted for uniformity: the schema is JSON already')
    .action(() => {
      io.out(`${JSON.stringify(scalerConfigJsonSchema(), null, 2)}\n`);
      process.exitCode = 0;
    });
  schemaCmd.exitOverride(usageExitFor(schemaCmd));
}
