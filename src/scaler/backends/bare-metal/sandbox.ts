import { dirname } from 'node:path';

/**
 * The bubblewrap sandbox for `KICI_SANDBOX=true`: the host root read-only, a private /tmp, the
 * agent's own work dir the only writable host path, its own PID namespace (so the whole tree dies
 * with its pid 1), and no capabilities: bwrap started by root would otherwise hand them on (and the
 * agent could remount). With a per-agent uid, setpriv inside needs CAP_SETUID for an instant and
 * drops every capability itself on the switch, so bwrap keeps them then. `hide` lists host dirs the agent must not see at all (the orchestrator's data dir,
 * the directory holding other agents' homes): each gets an empty tmpfs on top.
 */
export interface SandboxSpec {
  workDir: string;
  hide: string[];
  /**
   * Host dirs replaced by an empty tmpfs in which kept installs show again (the orchestrator's home,
   * where its own install may live). /tmp is always one.
   */
  cover?: string[];
  /** Host files (the admin token, the TLS key) replaced by an empty file. */
  hideFiles?: string[];
  /**
   * Host dirs the agent needs to start (its own install, the node it runs on) that the private /tmp
   * or a hidden dir would otherwise cover: shown again, read-only.
   */
  keep?: string[];
  /** False when setpriv runs inside and drops them on the uid switch. */
  dropCaps: boolean;
}

export function bwrapArgs(spec: SandboxSpec): string[] {
  const covers = ['/tmp', ...(spec.cover ?? []).filter((c) => c !== '/' && c !== '/tmp')];
  const args = ['--ro-bind', '/', '/', '--dev', '/dev', '--proc', '/proc'];
  for (const c of covers) args.push('--tmpfs', c);
  // Kept installs before the hidden dirs, so a hidden dir inside an install stays hidden. The dirs
  // bwrap makes on the private /tmp to mount them on would be 0700 root: a per-agent uid could not
  // walk through them, so they are made world-traversable first.
  const made = new Set<string>();
  for (const dir of spec.keep ?? []) {
    for (const parent of parentsBelowCover(dir, covers)) {
      if (made.has(parent)) continue;
      made.add(parent);
      args.push('--perms', '0755', '--dir', parent);
    }
    args.push('--ro-bind', dir, dir);
  }
  for (const dir of spec.hide) args.push('--tmpfs', dir);
  // Only where the file still shows: bwrap would make the path (and its dirs) on a covering tmpfs.
  const shown = (f: string) =>
    !spec.hide.some((d) => under(f, d)) &&
    (!covers.some((c) => under(f, c)) || (spec.keep ?? []).some((k) => under(f, k)));
  for (const file of (spec.hideFiles ?? []).filter(shown)) args.push('--ro-bind', '/dev/null', file);
  // After the tmpfs mounts, so the own dir shows through whatever hides its parent. The agent
  // changes into it itself (KICI_WORK_DIR): bwrap could not, when the dir belongs to the agent's uid.
  args.push('--bind', spec.workDir, spec.workDir, '--chdir', '/', '--unshare-pid');
  if (spec.dropCaps) args.push('--cap-drop', 'ALL');
  return args;
}

const under = (path: string, dir: string) => path.startsWith(`${dir}/`);

/** `/tmp/a/b/c` → [`/tmp/a`, `/tmp/a/b`]: the dirs between the covering tmpfs and a kept dir. */
function parentsBelowCover(dir: string, covers: string[]): string[] {
  const cover = covers.filter((c) => dir.startsWith(`${c}/`)).sort((a, b) => b.length - a.length)[0];
  if (!cover) return [];
  const out: string[] = [];
  for (let p = dirname(dir); p !== cover && p !== dirname(p); p = dirname(p)) out.unshift(p);
  return out;
}
