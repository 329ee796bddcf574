import { pino, type Logger as PinoLogger, type DestinationStream } from 'pino';

/** The logging port: pino's shape, so any pino logger (or a silent one) fits. */
export type Logger = PinoLogger;

export interface LoggerOptions {
  level?: string;
  destination?: DestinationStream;
}

/** Field names whose values must never reach a log line. */
const REDACT = [
  'token',
  '*.token',
  'agentToken',
  '*.agentToken',
  'claimCode',
  '*.claimCode',
  'authorization',
  '*.authorization',
  'env.KICI_AGENT_TOKEN',
  '*.env.KICI_AGENT_TOKEN',
];

export function createLogger(opts: LoggerOptions = {}): Logger {
  const options = {
    level: opts.level ?? process.env.KICI_LOG_LEVEL ?? 'info',
    base: { service: 'kici-orchestrator' },
    redact: { paths: REDACT, censor: '[redacted]' },
  };
  return opts.destination ? pino(options, opts.destination) : pino(options);
}

export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
