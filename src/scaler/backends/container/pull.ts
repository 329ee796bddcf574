/** Image pull policies (IfNotPresent, Always, Never) with progress to the job's timeline. */
import type Docker from 'dockerode';
import { SpawnError } from '../../core/spawn-errors.js';
import { errorMessage } from '../../../util/errors.js';
import { statusOf } from './engine-errors.js';

export type PullPolicy = 'IfNotPresent' | 'Always' | 'Never';

/** What a policy asks for, given whether the engine already has the image. */
export function pullDecision(policy: PullPolicy, present: boolean): 'use' | 'pull' | 'refuse' {
  if (policy === 'Always') return 'pull';
  if (present) return 'use';
  return policy === 'Never' ? 'refuse' : 'pull';
}

export interface PullOptions {
  onProgress(detail: string): void;
  signal?: AbortSignal | undefined;
  authconfig?: Docker.AuthConfig | undefined;
  /**
   * Called only when a pull is due, for registry auth read at that moment (a secret store): an
   * image already on the engine needs no credentials, and none are read for it.
   */
  resolveAuth?: (() => Promise<Docker.AuthConfig | undefined>) | undefined;
}

async function imagePresent(docker: Docker, image: string): Promise<boolean> {
  try {
    await docker.getImage(image).inspect();
    return true;
  } catch (err) {
    if (statusOf(err) === 404) return false;
    throw err;
  }
}

/** Make `image` available under `policy`; throws a classified SpawnError when it cannot be. */
export async function ensureImage(
  docker: Docker,
  image: string,
  policy: PullPolicy,
  opts: PullOptions,
): Promise<void> {
  const decision = pullDecision(policy, policy === 'Always' ? false : await imagePresent(docker, image));
  if (decision === 'use') return;
  if (decision === 'refuse')
    throw new SpawnError(
      'image-pull',
      `image ${image} is not on the engine and imagePullPolicy is Never: load it (npm run image:agent builds the agent image) or set imagePullPolicy: IfNotPresent`,
      { deterministic: true, retryable: false },
    );
  const authconfig = opts.resolveAuth ? await opts.resolveAuth() : opts.authconfig;
  opts.onProgress(`pulling image ${image}`);
  try {
    await pull(docker, image, { ...opts, authconfig });
  } catch (err) {
    throw new SpawnError('image-pull', `could not pull image ${image}: ${errorMessage(err)}`, { cause: err });
  }
  opts.onProgress(`pulled image ${image}`);
}

function pull(docker: Docker, image: string, opts: PullOptions): Promise<void> {
  return new Promise((ok, fail) => {
    const pullOpts: Record<string, unknown> = {};
    if (opts.authconfig) pullOpts.authconfig = opts.authconfig;
    if (opts.signal) pullOpts.abortSignal = opts.signal;
    docker.pull(image, pullOpts, (err: unknown, stream?: NodeJS.ReadableStream) => {
      if (err || !stream) return fail(err ?? new Error('no pull stream'));
      // One timeline line per layer and status change, not one per progress tick.
      const last = new Map<string, string>();
      // The engine reports a failed pull inside the stream, which still ends normally.
      let streamError: string | undefined;
      docker.modem.followProgress(
        stream,
        (done: unknown) => (done ? fail(done) : streamError ? fail(new Error(streamError)) : ok()),
        (ev: { id?: string; status?: string; error?: string }) => {
          if (ev.error) {
            streamError = ev.error;
            return;
          }
          const key = ev.id ?? '';
          if (!ev.status || last.get(key) === ev.status) return;
          last.set(key, ev.status);
          opts.onProgress(ev.id ? `${ev.id}: ${ev.status}` : ev.status);
        },
      );
    });
  });
}
