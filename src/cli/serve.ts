import { Orchestrator } from '../server/orchestrator.js';
import { createLogger } from '../util/logger.js';

export interface ServeOptions {
  config?: string;
  configDir?: string;
  listen?: string;
  dataDir?: string;
  databaseUrl?: string;
}

export function parseListen(value: string): { host: string; port: number } {
  const m = /^(.*):(\d{1,5})$/.exec(value);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw new Error(`--listen: expected host:port, got "${value}"`);
  return { host: m[1]!.replace(/^\[(.*)\]$/, '$1') || '127.0.0.1', port };
}

/** `kici-orchestrator serve`: runs until SIGTERM/SIGINT; SIGHUP reloads the scaler config. */
export async function serve(o: ServeOptions): Promise<number> {
  const listen = parseListen(o.listen ?? process.env.KICI_LISTEN ?? '127.0.0.1:8080');
  const logger = createLogger();
  const orch = await Orchestrator.start({
    host: listen.host,
    port: listen.port,
    dataDir: o.dataDir ?? process.env.KICI_DATA_DIR ?? './.kici-data',
    databaseUrl: o.databaseUrl ?? process.env.KICI_DATABASE_URL,
    scalerConfigPath: o.config ?? process.env.KICI_SCALER_CONFIG_PATH,
    scalerConfigDir: o.configDir ?? process.env.KICI_SCALER_CONFIG_DIR,
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
    }, 200);
  });
  return new Promise((resolve) => {
    const stop = (sig: string) => {
      logger.info({ signal: sig }, 'stopping');
      void orch.stop().then(
        () => resolve(0),
        (err: unknown) => {
          logger.error({ err: (err as Error).message }, 'stop failed');
          resolve(1);
        },
      );
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
}
