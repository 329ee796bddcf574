/**
 * Loading a staged rootfs into container engines through their Docker-compatible API (Docker's
 * socket or Podman's): the rootfs is packed once into a tar file, then imported and tagged in each
 * engine named. Engines are checked for reachability first, so a missing daemon is reported before
 * the slow staging starts, in words that say how to point at one.
 */
import { spawn } from 'node:child_process';
import { createReadStream } from 'node:fs';
import Docker from 'dockerode';
import { UsageError, UserError } from '../util/errors.js';

export const DEFAULT_ENGINE = 'unix:///var/run/docker.sock';

/** Where the engines came from, so an error can name the setting to change. */
export interface EngineTargets {
  hosts: string[];
  source: string;
}

/** `--host` values when given, else KICI_AGENT_IMAGE_HOSTS (space-separated), else DOCKER_HOST. */
export function engineTargets(flag: string[] | undefined, env: NodeJS.ProcessEnv): EngineTargets {
  const pick = (): EngineTargets => {
    if (flag?.length) return { hosts: flag, source: '--host' };
    const many = env.KICI_AGENT_IMAGE_HOSTS?.split(/\s+/).filter(Boolean);
    if (many?.length) return { hosts: many, source: 'KICI_AGENT_IMAGE_HOSTS' };
    if (env.DOCKER_HOST) return { hosts: [env.DOCKER_HOST], source: 'DOCKER_HOST' };
    return { hosts: [DEFAULT_ENGINE], source: 'the default (DOCKER_HOST is not set)' };
  };
  const t = pick();
  for (const h of t.hosts)
    if (!/^unix:\/\/\/./.test(h))
      throw new UsageError(
        `${t.source}: ${JSON.stringify(h)} is not a unix:///path socket URL; images are loaded through a local engine socket, e.g. unix:///var/run/docker.sock`,
      );
  return t;
}

const clientFor = (host: string) => new Docker({ socketPath: host.slice('unix://'.length) });

/** Fail with the fix when an engine does not answer. */
export async function checkEngines(t: EngineTargets): Promise<void> {
  for (const host of t.hosts) {
    try {
      await clientFor(host).ping();
    } catch (err) {
      const why = (err as Error).message.split('\n')[0];
      throw new UserError(
        `no container engine answers at ${host} (${t.source}): ${why}. Fix: start dockerd (or \`podman system service\`), then set DOCKER_HOST=unix:///path/to/its.sock or pass --host unix:///path/to/its.sock`,
      );
    }
  }
}

/** Uid and gid for a path of the rootfs that must not belong to root (e.g. a data dir). */
export interface OwnedPath {
  path: string;
  uid: number;
  gid: number;
}

/** Pack `stage` into `tarFile`: all root-owned, except `owned` entries (appended with their owner). */
export async function packRootfs(stage: string, tarFile: string, owned: OwnedPath[] = []): Promise<void> {
  const base = ['-C', stage, '--numeric-owner', '-f', tarFile];
  await tar([...base, '--owner=0', '--group=0', ...owned.map((o) => `--exclude=./${o.path}`), '-c', '.']);
  for (const o of owned)
    await tar([...base, `--owner=${o.uid}`, `--group=${o.gid}`, '--no-recursion', '-r', `./${o.path}`]);
}

function tar(args: string[]): Promise<void> {
  return new Promise((ok, fail) => {
    const child = spawn('tar', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d) => (err += String(d)));
    child.on('error', fail);
    child.on('close', (code) => (code === 0 ? ok() : fail(new Error(`tar ${args.join(' ')}: ${err}`))));
  });
}

/** Import the packed rootfs into `host` as `ref`, with Dockerfile-style `changes`; returns its size. */
export async function importRootfs(
  host: string,
  tarFile: string,
  ref: string,
  changes: string[],
): Promise<number> {
  const docker = clientFor(host);
  const [repo, tag] = splitRef(ref);
  const out = await docker.importImage(
    createReadStream(tarFile) as unknown as string,
    {
      repo,
      tag,
      changes,
    } as object,
  );
  const events = await new Promise<unknown[]>((ok, fail) =>
    docker.modem.followProgress(out, (e: unknown, res: unknown[]) => (e ? fail(e) : ok(res))),
  );
  // Podman's compatible import ignores the tag; so the imported id is tagged explicitly on both.
  const id = /(sha256:)?[0-9a-f]{64}/.exec(JSON.stringify(events))?.[0];
  if (!id)
    throw new Error(
      `the engine did not report the imported image id: ${JSON.stringify(events).slice(0, 300)}`,
    );
  await docker.getImage(id).tag({ repo, tag });
  if (tag !== 'latest') {
    // Podman also named it <repo>:latest; drop that name (only if it is this very image).
    const latest = await docker
      .getImage(`${repo}:latest`)
      .inspect()
      // No such name (404): the engine did not add one, so there is nothing to drop. Any other
      // answer is an engine in trouble, said as such rather than taken for "no such name".
      .catch((err: unknown) => {
        if ((err as { statusCode?: unknown } | null)?.statusCode === 404) return undefined;
        throw err;
      });
    if (latest && latest.Id.endsWith(id.replace('sha256:', '')))
      await docker
        .getImage(`${repo}:latest`)
        .remove({ noprune: true })
        // Only a spare name for the image just built is left behind; the requested tag is in place.
        .catch(() => undefined);
  }
  return (await docker.getImage(ref).inspect()).Size;
}

/** An image reference as `docker tag` takes it: lower-case repository path, optional tag. */
export function checkRef(ref: string, field: string): string {
  const ok =
    /^[a-z0-9]+([._-][a-z0-9]+)*(\/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$/;
  if (!ok.test(ref))
    throw new UsageError(
      `${field}: ${JSON.stringify(ref)} is not an image reference; use a lower-case name with an optional :tag, e.g. kici-agent:0.1.0`,
    );
  return ref;
}

function splitRef(r: string): [string, string] {
  const at = r.lastIndexOf(':');
  return at > r.lastIndexOf('/') ? [r.slice(0, at), r.slice(at + 1)] : [r, 'latest'];
}
