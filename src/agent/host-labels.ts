import { accessSync, constants } from 'node:fs';
import { arch, hostname, platform } from 'node:os';

/** Facts about this host that the agent reports itself (allowed outside its token's label scope). */
export function hostLabels(): string[] {
  const labels: string[] = [];
  const os = platform();
  if (os === 'linux') labels.push('kici:os:linux');
  else if (os === 'darwin') labels.push('kici:os:macos', 'kici:os:darwin');
  else if (os === 'win32') labels.push('kici:os:windows', 'kici:os:win32');
  else labels.push(`kici:os:${os}`);
  const a = arch();
  if (a === 'x64') labels.push('kici:arch:x64', 'kici:arch:amd64');
  else if (a === 'arm64') labels.push('kici:arch:arm64');
  else labels.push(`kici:arch:${a}`);
  labels.push(`kici:host:${hostname().toLowerCase()}`);
  // Inside a job's own image the agent serves that job only; routing keeps every other job away.
  if (process.env.KICI_JOB_IMAGE_AGENT === '1') labels.push('kici:runtime:job-image');
  labels.push(...runtimeLabels(process.env));
  return labels;
}

/**
 * `kici:runtime:docker` / `kici:runtime:podman` for each engine this agent can talk to: the one
 * DOCKER_HOST or CONTAINER_HOST names (a unix socket must be usable; a remote engine is taken at
 * the operator's word), plus the default socket paths. This is the agent host's fact; the
 * orchestrator's filesystem says nothing about it.
 */
export function runtimeLabels(env: NodeJS.ProcessEnv, usable: (path: string) => boolean = canUse): string[] {
  const found = new Set<string>();
  const fromUrl = (url: string | undefined, kind: (path: string) => 'docker' | 'podman') => {
    if (!url) return;
    if (url.startsWith('unix://')) {
      const path = url.slice('unix://'.length);
      if (usable(path)) found.add(`kici:runtime:${kind(path)}`);
    } else if (/^(tcp|ssh|https?):\/\//.test(url)) found.add(`kici:runtime:${kind(url)}`);
  };
  // Podman's Docker-compatible socket is often what DOCKER_HOST points at; its path says so.
  fromUrl(env.DOCKER_HOST, (p) => (p.includes('podman') ? 'podman' : 'docker'));
  fromUrl(env.CONTAINER_HOST, () => 'podman');
  if (usable('/var/run/docker.sock')) found.add('kici:runtime:docker');
  const xdg = env.XDG_RUNTIME_DIR;
  if (usable('/run/podman/podman.sock') || (xdg && usable(`${xdg}/podman/podman.sock`)))
    found.add('kici:runtime:podman');
  return [...found].sort();
}

export function canUse(path: string): boolean {
  try {
    accessSync(path, constants.R_OK | constants.W_OK);
    return true;
  } catch {
    return false;
  }
}
