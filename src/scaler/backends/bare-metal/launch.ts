import type { AgentUser } from './users.js';

/**
 * The command line that starts one agent, built from the inside out:
 *   [cgroup join shell | systemd user scope] → [bwrap …] → [setpriv to the agent's uid [→ env]] → binary
 * The shell joins the cgroups while still privileged; bwrap needs root to mount without user
 * namespaces; setpriv drops to the agent's uid last, inside the sandbox, so nothing the agent runs
 * ever holds root.
 */
export interface LaunchSpec {
  binary: string;
  /** An execute-only Node that runs `binary` (a node script), so the agent starts non-dumpable. */
  runtime?: string | undefined;
  procsFiles?: string[] | undefined;
  /**
   * A command to start the agent under (a systemd user scope), and the variables it alone needs,
   * removed again (through `env -u`) before the agent starts.
   */
  scope?: { prefix: string[]; unset: string[] } | undefined;
  sandbox?: string[] | undefined;
  user?: AgentUser | undefined;
  /**
   * The process that forks the agent runs as root, so it can switch to the agent's uid itself
   * between its fork and its exec (see `Launch.as`).
   */
  forkerIsRoot?: boolean | undefined;
}

export interface Launch {
  file: string;
  args: string[];
  /**
   * Start `file` under this uid and gid: the forking process drops its supplementary groups, then
   * sets the gid and the uid, before the exec (what `spawn`'s `uid` and `gid` options do).
   */
  as?: { uid: number; gid: number } | undefined;
}

export function launchCommand(spec: LaunchSpec): Launch {
  let cmd = spec.runtime ? [spec.runtime, spec.binary] : [spec.binary];
  if (spec.user) {
    const { uid, gid } = spec.user;
    // When nothing needs root between the fork and setpriv (no cgroup shell, no sandbox, no scope)
    // and the forker is root, the forker switches uid. Root losing uid 0 loses every capability,
    // so setpriv then execs the execute-only Node with none and the kernel seals the agent on that
    // exec: no `env` in between, one exec fewer on every cold start. setpriv still sets what the
    // fork cannot: no new privileges, and an empty inheritable set.
    if (spec.forkerIsRoot && !spec.sandbox && !spec.procsFiles?.length && !spec.scope?.prefix.length)
      return { file: 'setpriv', args: ['--inh-caps=-all', '--no-new-privs', '--', ...cmd], as: { uid, gid } };
    // setpriv keeps its capabilities across its own uid switch and loses them only in its exec, so
    // when it runs the execute-only Node directly it may still read it and the kernel does not
    // seal the agent: the agent then boots Node a second time to seal itself. Handing the exec to
    // `env`, which starts under the agent's uid with no capability at all, seals it on the first
    // boot, for the cost of a program far smaller than Node.
    if (spec.runtime) cmd = ['env', '--', ...cmd];
    // A non-root orchestrator switches uid with ambient capabilities, which the kernel keeps across
    // a switch between two non-root uids: clearing the inheritable set clears them, so the agent
    // starts with none.
    cmd = [
      'setpriv',
      `--reuid=${uid}`,
      `--regid=${gid}`,
      '--clear-groups',
      '--inh-caps=-all',
      '--no-new-privs',
      '--',
      ...cmd,
    ];
  }
  if (spec.sandbox) cmd = ['bwrap', ...spec.sandbox, '--', ...cmd];
  if (spec.procsFiles?.length) {
    const script =
      'for f in "$@"; do case "$f" in --) break;; esac; echo $$ > "$f"; shift; done; shift; exec "$@"';
    cmd = ['/bin/sh', '-c', script, 'kici-cgroup-join', ...spec.procsFiles, '--', ...cmd];
  }
  if (spec.scope?.prefix.length) {
    const unset = spec.scope.unset.flatMap((name) => ['-u', name]);
    cmd = [...spec.scope.prefix, ...(unset.length ? ['env', ...unset, '--'] : []), ...cmd];
  }
  return { file: cmd[0]!, args: cmd.slice(1) };
}
