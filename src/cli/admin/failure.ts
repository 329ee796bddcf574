/**
 * How kici-admin ends when a command fails: the exit code, and the error as text on stderr or, with
 * `--json`, as one JSON object on stdout (so a script reading stdout always gets JSON).
 *
 * Exit codes: 0 success; 1 the command ran and failed (a job failed, a file is invalid, the server
 * is unreachable, the thing named does not exist or is in the wrong state); 2 the command line is
 * wrong (unknown command or option, a missing argument, or a value that is not valid, whether the
 * CLI or the server found it out).
 */
import { CommanderError, type Command } from 'commander';
import { UsageError, UserError } from '../../util/errors.js';
import { ApiError } from './client.js';

export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

const QUIET_CODES = new Set(['commander.helpDisplayed', 'commander.version', 'commander.help']);

/** `--json` anywhere before a `--` asks for JSON output, errors included. */
export function wantsJson(argv: readonly string[]): boolean {
  const end = argv.indexOf('--');
  return (end === -1 ? argv : argv.slice(0, end)).includes('--json');
}

/** With JSON errors, commander's own text (message, help after an error) must not reach stderr. */
export function silenceCommanderErrors(cmd: Command): void {
  cmd.configureOutput({ writeErr: () => {}, outputError: () => {} });
  for (const sub of cmd.commands) silenceCommanderErrors(sub);
}

export function exitCodeFor(err: unknown): number {
  if (err instanceof CommanderError) {
    if (QUIET_CODES.has(err.code)) return EXIT_OK;
    return err.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
  }
  if (err instanceof UsageError) return EXIT_USAGE;
  // The server refused a value given on the command line (an id, a label, a flag).
  if (err instanceof ApiError && err.status === 400) return EXIT_USAGE;
  return EXIT_FAILURE;
}

function problemsOf(err: unknown, message: string): string[] {
  if (err instanceof UserError && err.problems.length) return err.problems;
  return [message];
}

/** Report a failed command (commander has already printed its text unless silenced); returns the exit code. */
export function reportFailure(err: unknown, json: boolean): number {
  const code = exitCodeFor(err);
  if (code === EXIT_OK) return code;
  const message =
    err instanceof CommanderError
      ? err.message.replace(/^error: /, '')
      : err instanceof Error
        ? err.message
        : String(err);
  if (json) {
    process.stdout.write(
      JSON.stringify({ error: message, problems: problemsOf(err, message) }, null, 2) + '\n',
    );
  } else if (!(err instanceof CommanderError)) {
    process.stderr.write(`Error: ${message}\n`);
  }
  return code;
}
