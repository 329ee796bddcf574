#!/usr/bin/env node
/**
 * kici-agent: connects to an orchestrator and runs the jobs it is given. Kept free of heavy imports
 * so a cold agent starts in tens of milliseconds.
 */
import './node-check.js';
import { AgentConfigError, readAgentConfig } from '../agent/config.js';
import { DeadManSwitch } from '../agent/dead-man.js';
import { sealAgent } from '../agent/seal.js';
import { takeHandedToken } from '../agent/token-handoff.js';
import { formatText, logRecord, parseLogFormat, type LogFormat } from '../util/log-format.js';
import { packageVersion } from '../version.js';
import { exitWhenFlushed } from './exit.js';

// Our stdout/stderr are pipes to whoever started us (the orchestrator, for scaler agents). If that
// process dies, writes fail with EPIPE; the agent must survive that to reconnect to its successor.
for (const stream of [process.stdout, process.stderr]) stream.on('error', () => {});
// An orchestrator runs with umask 077 for its data dir; steps it starts get the usual 022 back.
// Any other umask (an operator's choice for a static agent) is kept.
const inheritedUmask = process.umask(0o022);
if (inheritedUmask !== 0o077) process.umask(inheritedUmask);

// One shape with the orchestrator's own log (pino's JSON), or text for a person at a terminal.
// A bad value is reported once main() runs; until then, JSON.
let format: LogFormat = 'json';
function log(level: 'info' | 'warn' | 'error', msg: string): void {
  const rec = logRecord('kici-agent', level, msg, { agentId: process.env.KICI_AGENT_ID });
  const line = format === 'text' ? formatText(rec) : JSON.stringify(rec);
  (level === 'info' ? process.stdout : process.stderr).write(line + '\n');
}

/** `--log-format <json|text>` (or `--log-format=text`) wins over KICI_LOG_FORMAT. */
function logFormatArg(argv: string[]): string | undefined {
  const i = argv.indexOf('--log-format');
  if (i >= 0) return argv[i + 1] ?? '';
  return argv.find((a) => a.startsWith('--log-format='))?.slice('--log-format='.length);
}

async function main(): Promise<number> {
  if (process.argv.includes('--version') || process.argv.includes('-V')) {
    process.stdout.write(packageVersion() + '\n');
    return 0;
  }
  if (process.argv.includes('--help') || process.argv.includes('-h')) {
    process.stdout.write(
      'kici-agent: runs CI jobs for a kici orchestrator.\n\n' +
        'Environment:\n' +
        '  KICI_URL               the orchestrator, http(s)://host:port (its /ws is dialled) or ws(s)://host:port/ws\n' +
        '  KICI_ORCHESTRATOR_URL  ws://host:port/ws of the orchestrator (wins over KICI_URL; one of them is required)\n' +
        "  KICI_AGENT_ID          this agent's id, as bound to its token (required)\n" +
        '  KICI_AGENT_TOKEN       bearer token from `kici-admin agent token create` (required,\n' +
        '                         unless given by one of the two below)\n' +
        '  KICI_AGENT_TOKEN_FILE  a file holding the token; removed once read\n' +
        '  KICI_AGENT_TOKEN_FD    an inherited descriptor holding the token; read to its end and closed\n' +
        "  KICI_LABELS            comma-separated labels (must be within the token's scope)\n" +
        '  KICI_SCALER_CLAIM_CODE one-time code redeemed for an id and a token (instead of both)\n' +
        '  KICI_EPHEMERAL=1       exit after one job\n' +
        '  KICI_CA_FILE           PEM CA certificates that wss:// is verified against (default: the system CAs)\n\n' +
        '  KICI_LOG_FORMAT        json (default) or text\n' +
        '  KICI_AGENT_SEAL=off    do not make the agent non-dumpable (lets same-uid debuggers, and steps, read its memory)\n' +
        "  KICI_READY_SHELL=0     do not start the next step's shell ahead while idle (docs/step-runner.md)\n\n" +
        'Options: --log-format json|text; --version prints the version; --help prints this.\n\n' +
        'Signals: SIGTERM finishes the current job, then exits; a second SIGTERM or SIGINT cancels it.\n',
    );
    return 0;
  }
  try {
    format = parseLogFormat(logFormatArg(process.argv) ?? process.env.KICI_LOG_FORMAT);
  } catch (err) {
    process.stderr.write(`kici-agent: ${(err as Error).message}\n`);
    return 2;
  }
  let cfg;
  try {
    // Taken before anything else runs, and removed from our environment: no job may inherit it.
    const token = takeHandedToken(process.env);
    // Then the agent makes itself non-dumpable (this re-executes it, token carried over), so the
    // steps it runs under its own uid cannot read its memory, where the token and session proof live.
    const seal = sealAgent(token);
    if (seal.kind === 'unsealed')
      log('warn', `agent memory is readable by its own steps on this host: ${seal.why}`);
    cfg = readAgentConfig({ ...process.env, ...(token ? { KICI_AGENT_TOKEN: token } : {}) });
    delete process.env.KICI_SCALER_CLAIM_CODE;
  } catch (err) {
    if (err instanceof AgentConfigError) {
      process.stderr.write(`kici-agent: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  // The dead-man switch is a fork of this process, and a fork costs with the process's size: started
  // before the agent's modules are loaded, it costs about half, and a single-use agent's job no
  // longer waits behind it when its registration is acknowledged.
  const deadMan = new DeadManSwitch(true);
  const { Agent } = await import('../agent/agent.js');
  const agent = new Agent(cfg, log, undefined, deadMan);
  // A static agent drains on the first SIGTERM (an operator's restart should not lose the job) and
  // cancels on the second, or on SIGINT. A scaler's SIGTERM means "tear down now": cancel at once.
  let terms = 0;
  process.on('SIGTERM', () => {
    terms++;
    const drain = !cfg.scalerManaged && terms === 1;
    void agent.stop(terms > 1 ? 'second SIGTERM' : 'SIGTERM', drain ? 'drain' : 'cancel');
  });
  process.on('SIGINT', () => void agent.stop('SIGINT'));
  return agent.run();
}

main().then(exitWhenFlushed, (err: unknown) => {
  process.stderr.write(`kici-agent: ${(err as Error).message}\n`);
  return exitWhenFlushed(1);
});
