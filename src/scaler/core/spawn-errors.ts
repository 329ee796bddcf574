import { errorMessage } from '../../util/errors.js';
import { SpawnTimeoutError } from './deadline.js';

/** Why a spawn failed, in terms an operator can act on. */
export type SpawnErrorKind =
  | 'binary-missing'
  | 'not-executable'
  | 'exited-before-register'
  | 'spawn-timeout'
  | 'image-pull'
  | 'engine-unavailable'
  | 'capacity'
  | 'config'
  | 'transient'
  | 'unknown';

export interface ClassifiedSpawnError {
  kind: SpawnErrorKind;
  message: string;
  /** The host refused the launch outright; the same attempt will fail the same way. */
  deterministic: boolean;
}

/** Kinds where repeating the identical launch cannot succeed until someone changes something. */
const DETERMINISTIC_KINDS: ReadonlySet<SpawnErrorKind> = new Set([
  'binary-missing',
  'not-executable',
  'config',
]);

export interface SpawnErrorOptions {
  retryable?: boolean;
  deterministic?: boolean;
  cause?: unknown;
}

/**
 * A classified spawn failure. `retryable` tells the manager whether a later attempt may succeed
 * on its own; `deterministic` marks failures that arm the provision backoff immediately.
 */
export class SpawnError extends Error {
  override readonly name: string = 'SpawnError';
  readonly kind: SpawnErrorKind;
  readonly retryable: boolean;
  readonly deterministic: boolean;

  constructor(kind: SpawnErrorKind, message: string, opts: SpawnErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.kind = kind;
    this.deterministic = opts.deterministic ?? DETERMINISTIC_KINDS.has(kind);
    this.retryable = opts.retryable ?? !this.deterministic;
  }
}

/** The host refused the launch outright (missing binary, bad batch path, spawn() threw). */
export class DeterministicSpawnError extends SpawnError {
  override readonly name = 'DeterministicSpawnError';

  constructor(kind: SpawnErrorKind, message: string, opts: { cause?: unknown } = {}) {
    super(kind, message, { cause: opts.cause, deterministic: true, retryable: false });
  }
}

const MAX_MESSAGE = 300;

/** One line, bounded: these messages end up in logs, metrics-adjacent status and job errors. */
function short(text: string): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > MAX_MESSAGE ? `${line.slice(0, MAX_MESSAGE - 1)}…` : line;
}

interface NodeErrorFields {
  code?: unknown;
  syscall?: unknown;
  path?: unknown;
  address?: unknown;
  statusCode?: unknown;
}

const TRANSIENT_CODES = new Set([
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENETDOWN',
  'EBUSY',
]);
const CAPACITY_CODES = new Set(['EAGAIN', 'EMFILE', 'ENFILE', 'ENOMEM', 'ENOSPC']);
const IMAGE_PULL_TEXT = /pull access denied|manifest unknown|no such image|image not found|failed to pull/i;
/** The registry answered, and the image is not there (or not ours): pulling again gets the same answer. */
const IMAGE_ABSENT_TEXT = /pull access denied|manifest unknown|no such image|image not found/i;

function fromCode(err: Error & NodeErrorFields): ClassifiedSpawnError | undefined {
  if (typeof err.code !== 'string') return undefined;
  const code = err.code;
  const syscall = typeof err.syscall === 'string' ? err.syscall : '';
  const target = String(err.path ?? err.address ?? '').trim();
  const at = target ? `: ${target}` : '';
  const spawning = syscall.startsWith('spawn');
  const connecting = syscall === 'connect';

  if (connecting && ['ENOENT', 'ECONNREFUSED', 'EACCES'].includes(code)) {
    const why = code === 'EACCES' ? 'permission denied on' : 'nothing listening at';
    return {
      kind: 'engine-unavailable',
      message: `container engine unreachable (${why} ${target || 'socket'})`,
      deterministic: false,
    };
  }
  if (code === 'ECONNREFUSED') {
    return { kind: 'engine-unavailable', message: `connection refused${at}`, deterministic: false };
  }
  if (code === 'ENOENT') {
    // spawn() reports the missing executable; any other ENOENT is a configured path that is not there.
    return spawning
      ? { kind: 'binary-missing', message: `agent executable not found${at}`, deterministic: true }
      : { kind: 'config', message: `file not found${at}`, deterministic: true };
  }
  if (code === 'EACCES' || code === 'EPERM' || code === 'ENOEXEC') {
    return spawning || code === 'ENOEXEC'
      ? {
          kind: 'not-executable',
          message: `agent executable cannot be run (${code})${at}`,
          deterministic: true,
        }
      : { kind: 'config', message: `permission denied (${code})${at}`, deterministic: true };
  }
  if (CAPACITY_CODES.has(code)) {
    return {
      kind: 'capacity',
      message: `host out of resources (${code}): ${err.message}`,
      deterministic: false,
    };
  }
  if (TRANSIENT_CODES.has(code)) {
    return { kind: 'transient', message: `${code}: ${err.message}`, deterministic: false };
  }
  return undefined;
}

/**
 * Whether this failure defers further launches of its label set. Deterministic failures do; so does
 * compute that started and died before registering: the identical launch dies the same way.
 * Everything else (timeouts, an unreachable engine, a busy host) is retried.
 */
export function armsBackoff(e: ClassifiedSpawnError): boolean {
  return e.deterministic || e.kind === 'exited-before-register';
}

/** Map anything a backend threw to a kind, a short message and whether it is deterministic. */
export function classifySpawnError(err: unknown): ClassifiedSpawnError {
  // Walk the cause chain: an AbortError from a Node API carries our SpawnTimeoutError as cause.
  let current: unknown = err;
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    if (current instanceof SpawnError) {
      return { kind: current.kind, message: short(current.message), deterministic: current.deterministic };
    }
    if (current instanceof SpawnTimeoutError) {
      return { kind: 'spawn-timeout', message: current.message, deterministic: false };
    }
    current = current.cause;
  }

  if (!(err instanceof Error))
    return { kind: 'unknown', message: short(errorMessage(err)), deterministic: false };
  const fields = err as Error & NodeErrorFields;
  const byCode = fromCode(fields);
  if (byCode) return { ...byCode, message: short(byCode.message) };

  if (IMAGE_PULL_TEXT.test(err.message) || (fields.statusCode === 404 && /image/i.test(err.message))) {
    const absent = IMAGE_ABSENT_TEXT.test(err.message) || fields.statusCode === 404;
    return { kind: 'image-pull', message: short(`image pull failed: ${err.message}`), deterministic: absent };
  }
  if (err.name === 'UserError' || err.name === 'ZodError') {
    return { kind: 'config', message: short(err.message), deterministic: true };
  }
  if (typeof fields.statusCode === 'number' && fields.statusCode >= 500) {
    return {
      kind: 'transient',
      message: short(`engine error ${fields.statusCode}: ${err.message}`),
      deterministic: false,
    };
  }
  return { kind: 'unknown', message: short(err.message || err.name), deterministic: false };
}
