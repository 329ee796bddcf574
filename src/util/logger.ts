import { jsonLineToText, type LogFormat } from './log-format.js';
import { pino, type Logger as PinoLogger, type DestinationStream } from 'pino';

/** The logging port: pino's shape, so any pino logger (or a silent one) fits. */
export type Logger = PinoLogger;

export interface LoggerOptions {
  level?: string;
  destination?: DestinationStream;
  /** `text` renders each record for people; JSON (the default) is for log pipelines. */
  format?: LogFormat;
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
  const dest = opts.destination ?? (opts.format === 'text' ? process.stdout : undefined);
  if (opts.format === 'text' && dest) return pino(options, textStream(dest));
  return dest ? pino(options, dest) : pino(options);
}

/** pino writes one JSON line per call; this renders each as text before passing it on. */
function textStream(out: DestinationStream): DestinationStream {
  return {
    write(chunk: string) {
      for (const line of chunk.split('\n')) if (line) out.write(jsonLineToText(line) + '\n');
    },
  };
}

export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
