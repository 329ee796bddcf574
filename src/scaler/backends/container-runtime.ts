/**
 * Which container engine this host has: the Docker socket, then Podman's, then the rootless one.
 * Shared by the container backend and bare-metal job-image mode, hence at the top of backends/.
 */
import { access, constants } from 'node:fs/promises';

export type ContainerRuntime = 'docker' | 'podman';

export interface DetectedRuntime {
  socketPath: string;
  runtime: ContainerRuntime;
}

/** Candidate sockets in probe order; a hint keeps only that runtime's paths. */
export function runtimeProbeOrder(
  hint: ContainerRuntime | 'auto' | undefined,
  env: NodeJS.ProcessEnv = process.env,
): DetectedRuntime[] {
  const all: DetectedRuntime[] = [
    { socketPath: '/var/run/docker.sock', runtime: 'docker' },
    { socketPath: '/run/podman/podman.sock', runtime: 'podman' },
  ];
  if (env.XDG_RUNTIME_DIR)
    all.push({ socketPath: `${env.XDG_RUNTIME_DIR}/podman/podman.sock`, runtime: 'podman' });
  return hint === 'docker' || hint === 'podman' ? all.filter((c) => c.runtime === hint) : all;
}

/** Can we read and write this path? Injectable so the order can be tested without real sockets. */
export type SocketAccess = (path: string) => Promise<boolean>;

export const socketUsable: SocketAccess = (path) =>
  access(path, constants.R_OK | constants.W_OK).then(
    () => true,
    () => false,
  );

/** The first usable socket in probe order, or null when the host has none. */
export async function detectRuntime(
  hint?: ContainerRuntime | 'auto',
  opts: { env?: NodeJS.ProcessEnv; canUse?: SocketAccess } = {},
): Promise<DetectedRuntime | null> {
  const canUse = opts.canUse ?? socketUsable;
  for (const c of runtimeProbeOrder(hint, opts.env)) if (await canUse(c.socketPath)) return c;
  return null;
}

/** An explicit socket path names its runtime by its path: Podman's sockets say so. */
export function runtimeOfSocket(path: string): ContainerRuntime {
  return path.includes('podman') ? 'podman' : 'docker';
}

/** Parse DOCKER_HOST-style `unix:///path` or a bare path into a socket path, else undefined. */
export function socketPathOfHost(host: string): string | undefined {
  if (host.startsWith('unix://')) return host.slice('unix://'.length);
  if (host.startsWith('/')) return host;
  return undefined;
}

/** How the composition root reached the engine of one container scaler. */
export interface EngineConnection extends DetectedRuntime {
  /** False for a remote engine (`host`): there is no socket on this host to mount. */
  local: boolean;
}

/**
 * Where a container scaler's engine is, in this precedence: a remote `host`, an explicit
 * `socketPath`, DOCKER_HOST, else the first local socket in probe order. Only locates; the caller builds the
 * client (dockerode) from the answer.
 */
export async function locateEngine(
  entry: {
    name: string;
    host?: string | undefined;
    socketPath?: string | undefined;
    runtime: ContainerRuntime | 'auto';
  },
  opts: { env?: NodeJS.ProcessEnv; canUse?: SocketAccess } = {},
): Promise<EngineConnection> {
  if (entry.host) {
    const runtime: ContainerRuntime = entry.runtime === 'podman' ? 'podman' : 'docker';
    const sock = socketPathOfHost(entry.host);
    return sock
      ? { socketPath: sock, runtime, local: true }
      : { socketPath: entry.host, runtime, local: false };
  }
  if (entry.socketPath)
    return { socketPath: entry.socketPath, runtime: runtimeOfSocket(entry.socketPath), local: true };
  // As for the docker CLI, DOCKER_HOST stands in for the default socket (not for Podman's).
  const dockerHost = opts.env?.DOCKER_HOST;
  if (dockerHost && entry.runtime !== 'podman') {
    const sock = socketPathOfHost(dockerHost);
    return sock
      ? { socketPath: sock, runtime: runtimeOfSocket(sock), local: true }
      : { socketPath: dockerHost, runtime: 'docker', local: false };
  }
  const found = await detectRuntime(entry.runtime, opts);
  if (!found)
    throw new Error(
      `scaler "${entry.name}": No container runtime found. Install Docker or Podman, or configure host (or socketPath) in this scaler's entry.`,
    );
  return { ...found, local: true };
}
