import { Command } from 'commander';
import { packageVersion } from '../../version.js';
import { registerAccessCommands } from './access-commands.js';
import { registerAgentCommands } from './agent-commands.js';
import { AdminClient } from './client.js';
import { registerClusterCommands } from './cluster-commands.js';
import { registerClusterSettingsCommands } from './cluster-settings-commands.js';
import { registerCompletionCommand } from './completion.js';
import { registerDiagnoseCommand } from './diagnose-command.js';
import { registerEventCommands } from './event-commands.js';
import { reportFailure, silenceCommanderErrors, wantsJson } from './failure.js';
import { registerFirecrackerCommands } from './firecracker-commands.js';
import { registerImageCommands } from './image-commands.js';
import { registerJobCommands } from './job-commands.js';
import { registerPruneCommand } from './prune-command.js';
import { registerBackupCommand } from './backup-command.js';
import { registerScalerApiCommands } from './scaler-commands.js';
import { registerScalerConfigCommands } from './scaler-config-commands.js';
import { registerExportTraceCommand, registerSimulateCommand } from './simulate-command.js';

/** The kici-admin program, built as a value so tests can run it in-process. */
export function buildAdminProgram(): Command {
  const program = new Command('kici-admin')
    .description('Operate a kici orchestrator: jobs, agents and the scaler')
    .version(packageVersion())
    .option(
      '--server <url>',
      'orchestrator URL (default: $KICI_URL, $KICI_SERVER_URL or http://127.0.0.1:8080)',
    )
    .option('--token <token>', 'access token (default: $KICI_ADMIN_TOKEN, else the token file)')
    .option(
      '--token-file <file>',
      "file holding the token (default: the orchestrator's bootstrap file: $KICI_ADMIN_TOKEN_FILE, /etc/kici/admin-token for root, else $XDG_CONFIG_HOME/kici/admin-token)",
    )
    .option(
      '--data-dir <dir>',
      'data dir of an orchestrator from before access tokens, which kept its token there (default: $KICI_DATA_DIR, else /var/lib/kici for root, $XDG_STATE_HOME/kici or ~/.local/state/kici otherwise)',
    )
    .showHelpAfterError()
    .exitOverride();
  const client = (cmd: Command) => {
    const g = cmd.optsWithGlobals<{
      server?: string;
      token?: string;
      tokenFile?: string;
      dataDir?: string;
    }>();
    return AdminClient.create({
      server: g.server,
      token: g.token,
      tokenFile: g.tokenFile,
      dataDir: g.dataDir,
    });
  };
  registerJobCommands(program, client);
  registerAgentCommands(program, client);
  const scaler = program.command('scaler').description('the autoscaler: configuration, status, explanations');
  registerScalerConfigCommands(scaler);
  registerScalerApiCommands(scaler, client);
  registerSimulateCommand(scaler, client);
  registerExportTraceCommand(
    program.commands.find((c) => c.name() === 'job')!,
    client,
  );
  registerDiagnoseCommand(program, client);
  registerEventCommands(program, client);
  registerClusterCommands(program, client);
  registerClusterSettingsCommands(program, client);
  registerFirecrackerCommands(program, client);
  registerAccessCommands(program, client);
  registerPruneCommand(program, client);
  registerBackupCommand(program, client);
  registerImageCommands(program);
  registerCompletionCommand(program);
  return program;
}

/** Run with operator-friendly failures: exit 1 for a failure, 2 for usage, no stack traces. */
export async function runAdmin(argv: string[]): Promise<number> {
  const program = buildAdminProgram();
  const json = wantsJson(argv);
  if (json) silenceCommanderErrors(program);
  try {
    await program.parseAsync(argv, { from: 'user' });
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (err) {
    return reportFailure(err, json);
  }
}
