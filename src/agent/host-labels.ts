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
  if (canUse('/var/run/docker.sock')) labels.push('kici:runtime:docker');
  const xdg = process.env.XDG_RUNTIME_DIR;
  if (canUse('/run/podman/podman.sock') || (xdg && canUse(`${xdg}/podman/podman.sock`))) {
    labels.push('kici:runtime:podman');
  }
  return labels;
}

function canUse(path: string): boolean {
  try {
    accessSync(path, constants.R_OK | constants.W_OK);
    return true;
  } catch {
    return false;
  }
}
