import { orchestratorUrlFrom, readScalerSettings } from '../config/scaler-settings.js';
import { Orchestrator } from '../server/orchestrator.js';
import { tlsFilesFrom } from '../server/tls.js';
import { resolveDataDir } from '../util/default-data-dir.js';
import { UsageError, UserError } from '../util/errors.js';
import { parseLogFormat } from '../util/log-format.js';
import { createLogger } from '../util/logger.js';
import { retentionFromSettings, type RetentionKey } from '../store/retention/policy.js';

export interface ServeOptions {
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
  metricsPublic?: boolean;
  tlsCert?: string;
  tlsKey?: string;
  /** `--retain-*` and `--prune-interval`, raw (parsed with the env fallbacks). */
  retention?: Partial<Record<RetentionKey, string | undefined>>;
  /** The scaler settings' flags, by camelCased name (see SCALER_SETTINGS). */
  settingFlags?: Record<string, string | undefined>;
  logFormat?: string;
}

/** `--metrics-public` or KICI_METRICS_PUBLIC=true|1. */
export function metricsPublicFrom(flag: boolean | undefined, env = process.env.KICI_METRICS_PUBLIC): boolean {
  if (flag) return true;
  if (env === undefined || env === '' || env === 'false' || env === '0') return false;
  if (env === 'true' || env === '1') return true;
  throw new UserError(`KICI_METRICS_PUBLIC: expected true or false, got "${env}"`);
}

/** How long a graceful stop waits for running jobs when neither the flag nor the env sets it. */
export const DEFAULT_DRAIN_TIMEOUT_SECONDS = 60;

export function parseListen(value: string): { host: string; port: number } {
  const m = /^(.*):(\d{1,5})$/.exec(value);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw new UsageError(`--listen: expected host:port, got "${value}"`);
  return { host: m[1]!.replace(/^\[(.*)\]$/, '$1') || '127.0.0.1', port };
}

/** `--drain-timeout` / KICI_DRAIN_TIMEOUT: whole or fractional seconds, 0 to stop without waiting. */
export function parseDrainTimeout(value: string | undefined): number {
  if (value === undefined || value.trim() === '') return DEFAULT_DRAIN_TIMEOUT_SECONDS;
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0 || n > 86_400)
    throw new UsageError(`--drain-timeout: expected seconds from 0 to 86400, got "${value}"`);
  return n;
}

/**
 * `kici-orchestrator serve`: runs until SIGTERM/SIGINT; SIGHUP reloads the scaler config.
 * The first stop signal drains (running jobs finish, nothing new starts) for up to the drain
 * timeout; a second signal, or the timeout, stops at once and leaves running agents for the next start.
 */
export async function serve(o: ServeOptions): Promise<number> {
  const listen = parseListen(o.listen ?? process.env.KICI_LISTEN ?? '127.0.0.1:8080');
  const drainSeconds = parseDrainTimeout(o.drainTimeout ?? process.env.KICI_DRAIN_TIMEOUT);
  const retention = retentionFromSettings(o.retention ?? {});
  const scalerSettings = readScalerSettings(process.env, o.settingFlags ?? {});
  const agentUrl = orchestratorUrlFrom(o.orchestratorUrl, process.env.KICI_ORCHESTRATOR_URL);
  let format;
  try {
    format = parseLogFormat(o.logFormat ?? process.env.KICI_LOG_FORMAT);
  } catch (err) {
    throw new UserError((err as Error).message);
  }
  const logger = createLogger({ format });
  // A stop signal that arrives while the server is still starting is kept and acted on once it is up,
  // instead of killing the process half-way through opening its store.
  const early: string[] = [];
  const keepEarly = (sig: string) => early.push(sig);
  process.on('SIGTERM', keepEarly);
  process.on('SIGINT', keepEarly);
  const orch = await Orchestrator.start({
    host: listen.host,
    port: listen.port,
    dataDir: resolveDataDir(o.dataDir),
    databaseUrl: o.databaseUrl ?? process.env.KICI_DATABASE_URL,
    scalerConfigPath: o.config ?? process.env.KICI_SCALER_CONFIG_PATH,
    scalerConfigDir: o.configDir ?? process.env.KICI_SCALER_CONFIG_DIR,
    machineLedgerDir: o.machineLedgerDir ?? process.env.KICI_MACHINE_LEDGER_DIR,
    agentUrl,
    instanceId: o.instanceId,
    adminTokenFile: o.adminTokenFile,
    metricsPublic: metricsPublicFrom(o.metricsPublic),
    tls: tlsFilesFrom(o.tlsCert ?? process.env.KICI_TLS_CERT, o.tlsKey ?? process.env.KICI_TLS_KEY),
    retention,
    scalerSettings,
    logger,
  });
  let hupTimer: NodeJS.Timeout | undefined;
  process.on('SIGHUP', () => {
    // A burst of signals reloads once.
    if (hupTimer) clearTimeout(hupTimer);
    hupTimer = setTimeout(() => {
      void orch
        .reload()
        .then((r) => logger.info({ result: r.result, problems: r.problems }, 'scaler reload'));
      // A bad renewed certificate keeps the one in use, and says why.
      void orch.reloadTls().then(
        (r) => r === 'reloaded' && logger.info('TLS certificate and key reloaded'),
        (err: unknown) =>
          logger.error({ err: (err as Error).message }, 'TLS reload failed; keeping the current certificate'),
      );
    }, 200);
  });
  return new Promise((resolve) => {
    let signals = 0;
    let stopping = false;
    const stopNow = () => {
      if (stopping) return;
      stopping = true;
      // Agents that still run a job are left alive: the next start re-adopts them, as after a crash.
      void orch.stop({ agents: 'leave' }).then(
        () => resolve(0),
        (err: unknown) => {
          logger.error({ err: (err as Error).message }, 'stop failed');
          resolve(1);
        },
      );
    };
    const onSignal = (sig: string) => {
      if (++signals > 1) {
        logger.warn({ signal: sig }, 'second stop signal: stopping now; running jobs stay with their agents');
        return stopNow();
      }
      logger.info(
        { signal: sig, drainTimeoutSeconds: drainSeconds },
        `stopping: draining for up to ${drainSeconds}s (send ${sig} again to stop at once)`,
      );
      void orch.drain(drainSeconds * 1000).then((drained) => {
        // A second signal's stop also ends the drain: that is not its timeout, and it stops once.
        if (stopping) return;
        if (!drained)
          logger.warn(
            { activeJobs: orch.dispatcher.active.size },
            'drain timeout reached; stopping now; running jobs stay with their agents',
          );
        stopNow();
      });
    };
    process.off('SIGTERM', keepEarly);
    process.off('SIGINT', keepEarly);
    process.on('SIGTERM', () => onSignal('SIGTERM'));
    process.on('SIGINT', () => onSignal('SIGINT'));
    for (const sig of early) onSignal(sig);
  });
}
