/**
 * The environment of every host process the VM backend starts: the VMM (qemu, firecracker, the
 * jailer), the KVM probe, and the helpers (ip, mkfs.ext4, sysctl, nft, sudo).
 *
 * Built from nothing, like a bare-metal agent's (bare-metal/env.ts), and for a stronger reason: the
 * VMM is where a guest that breaks out of its VM lands, so it must hold none of the orchestrator's
 * credentials (KICI_ADMIN_TOKEN, the database URL, PG*). Nor may it run with what was preloaded
 * into the orchestrator: LD_PRELOAD (with libfaketime's FAKETIME, say, as the chaos tests use) goes
 * into the VMM's own clock, and so into every timer of its guest; a VM's agent once fell silent in
 * CI that way. None of these tools needs more than the few variables below.
 */

/**
 * What crosses over, and why each one:
 * - PATH: Node looks a bare command up in the child's PATH once an env is given (the default
 *   `qemu-system-x86_64`, `sudo`), and a tool that runs another finds it the same way.
 * - LANG, LC_ALL: the language of the messages they write to the VM's log and to our error reports.
 * - TZ: times in those messages read as the rest of the host's logs do.
 * - TMPDIR: where QEMU puts a temporary file when it needs one.
 * Not HOME or USER: QEMU runs with -no-user-config and none of the others reads a profile.
 */
export const VMM_ENV_ALLOWLIST = ['PATH', 'LANG', 'LC_ALL', 'TZ', 'TMPDIR'] as const;

/** The allowlisted variables of `hostEnv` that are set, and nothing else. */
export function vmmEnv(hostEnv: NodeJS.ProcessEnv): Record<string, string> {
  const env: Record<string, string> = {};
  for (const k of VMM_ENV_ALLOWLIST) {
    const v = hostEnv[k];
    if (v !== undefined) env[k] = v;
  }
  return env;
}
