/** Turn anything thrown into an Error, keeping the original as `cause`. */
export function toError(value: unknown): Error {
  if (value instanceof Error) return value;
  return new Error(typeof value === 'string' ? value : JSON.stringify(value), { cause: value });
}

export function errorMessage(value: unknown): string {
  return toError(value).message;
}

/**
 * An error caused by the operator's input (config, run file, CLI arguments).
 * CLIs print its message without a stack trace and exit 1.
 */
export class UserError extends Error {
  override readonly name = 'UserError';
  constructor(
    message: string,
    readonly problems: string[] = [message],
  ) {
    super(message);
  }
}

/**
 * A command line that cannot be right: a value given to an option or argument is not valid, or
 * options that do not go together. CLIs print its message and exit 2, like any usage error.
 */
export class UsageError extends UserError {}
