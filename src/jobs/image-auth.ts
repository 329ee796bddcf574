/**
 * Registry credentials for a job's `container.image`. A run file names them only by reference
 * (`<context>:<name>` in the orchestrator's secret store), so the stored job, its API views and
 * every log show the reference and never the value; the value is read when the image is pulled.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';

/** The user name registries that take a token (GitHub, GitLab, ...) expect when none is given. */
export const DEFAULT_REGISTRY_USERNAME = 'x-access-token';
/** Where the secret store lives: one file per secret, `<dir>/<context>/<name>`. */
export const SECRETS_DIR_ENV = 'KICI_SECRETS_DIR';

const part = '[A-Za-z0-9][A-Za-z0-9_.-]{0,127}';
const secretRef = z
  .string()
  .regex(new RegExp(`^${part}:${part}$`), 'a secret reference "<context>:<name>", like "ci:registry-token"');

export const imageAuthSchema = z
  .strictObject({
    /** The registry host the credentials are for; the image's own registry host when absent. */
    registry: z.string().min(1).max(255).optional(),
    usernameSecret: secretRef.optional(),
    usernameValue: z.string().min(1).max(255).optional(),
    tokenSecret: secretRef.optional(),
    // Accepted by the schema only to refuse it with a reason (below), rather than "unknown key".
    tokenValue: z.unknown().optional(),
  })
  .superRefine((a, ctx) => {
    if (a.tokenValue !== undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['tokenValue'],
        message:
          'a registry token is never written into a run file (it would be stored with the job); put it in the secret store and name it with tokenSecret: "<context>:<name>"',
      });
    else if (a.tokenSecret === undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['tokenSecret'],
        message: 'required: the secret holding the registry password or token, as "<context>:<name>"',
      });
    if (a.usernameSecret !== undefined && a.usernameValue !== undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['usernameValue'],
        message: 'give usernameSecret or usernameValue, not both',
      });
  });

/** References only; safe to store, log and show. */
export type ImageAuthSpec = z.output<typeof imageAuthSchema>;

/** What the engine takes as a pull's registry auth. Never logged, never put in an error. */
export interface RegistryAuth {
  username: string;
  password: string;
  serveraddress: string;
}

/**
 * The registry host of an image reference: its first path component when that looks like a host
 * (has a dot or a port, or is localhost), else Docker Hub.
 */
export function registryOf(image: string): string {
  const slash = image.indexOf('/');
  if (slash < 0) return 'docker.io';
  const first = image.slice(0, slash);
  return /[.:]/.test(first) || first === 'localhost' ? first : 'docker.io';
}

export class ImageAuthError extends Error {
  override readonly name = 'ImageAuthError';
}

/** Reads `<context>:<name>` from the secret store; the message names the reference, never a value. */
async function readSecret(ref: string, image: string, env: NodeJS.ProcessEnv): Promise<string> {
  const dir = env[SECRETS_DIR_ENV];
  if (!dir)
    throw new ImageAuthError(
      `the registry credentials for image ${image} name secret ${ref}, but no secret store is set up: set ${SECRETS_DIR_ENV} on the orchestrator to a directory holding <context>/<name> files`,
    );
  const [context, name] = ref.split(':') as [string, string];
  const file = join(dir, context, name);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new ImageAuthError(
      code === 'ENOENT'
        ? `secret ${ref} (registry credentials for image ${image}) is not in the secret store: write it to ${file}`
        : `secret ${ref} (registry credentials for image ${image}) cannot be read from ${file} (${code ?? 'error'}); the orchestrator's user must be able to read it`,
    );
  }
  // One trailing newline is what `echo token > file` leaves; it is never part of a token.
  const value = text.replace(/\r?\n$/, '');
  if (value === '')
    throw new ImageAuthError(`secret ${ref} (registry credentials for image ${image}) is empty in ${file}`);
  return value;
}

/** The engine auth for pulling `image` with the job's credentials, read from the secret store now. */
export async function resolveImageAuth(
  spec: ImageAuthSpec,
  image: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<RegistryAuth> {
  const password = await readSecret(spec.tokenSecret!, image, env);
  const username = spec.usernameSecret
    ? await readSecret(spec.usernameSecret, image, env)
    : (spec.usernameValue ?? DEFAULT_REGISTRY_USERNAME);
  return { username, password, serveraddress: spec.registry ?? registryOf(image) };
}
