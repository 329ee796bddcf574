/**
 * The environment of the host programs the orchestrator starts to run its agents' compute and
 * firewall: the micro-VM backend's VMM (qemu, firecracker, the jailer), its KVM probe and helpers
 * (ip, mkfs.ext4, sysctl, sudo), and `nft` wherever it runs (the containers' isolation, the start-up
 * probe, `kici-admin scaler reap-orphans`, the VMs' rules).
 *
 * Built from nothing, like a bare-metal agent's (bare-metal/env.ts). None of these programs has any
 * use for the orchestrator's credentials (KICI_ADMIN_TOKEN, the database URL, PG*), and the VMM is
 * where a guest that breaks out of its VM lands, so none of them gets them. Nor what was preloaded
 * into the orchestrator: LD_PRELOAD (with libfaketime's FAKETIME, say, as the chaos tests use) goes
 * into the VMM's own clock, and so into every timer of its guest; a VM's agent once fell silent in
 * CI that way. None of these tools needs more than the few variables below.
 */

/**
 * What crosses over, and why each one:
 * - PATH: Node looks a bare command up in the child's PATH once an env is given (the default
 *   `qemu-system-x86_64`, `sudo`), and a tool that runs another finds it the same way.
 * - LANG, LC_ALL: the language of the messages they write to the VM's log and to our error reports
 *   (the runners of the tools whose messages are matched replace LC_ALL with C).
 * - TZ: times in those messages read as the rest of the host's logs do.
 * - TMPDIR: where QEMU puts a temporary file when it needs one.
 * Not HOME or USER: QEMU runs with -no-user-config and none of the others reads a profile.
 */
export const HOST_TOOL_ENV_ALLOWLIST = ['PATH', 'LANG', 'LC_ALL', 'TZ', 'TMPDIR'] as const;

/** The allowlisted variables of `hostEnv` that are set, and nothing else. */
export function hostToolEnv(hostEnv: NodeJS.ProcessEnv): Record<string, string> {
  const env: Record<string, string> = {};
  for (const k of HOST_TOOL_ENV_ALLOWLIST) {
    const v = hostEnv[k];
    if (v !== undefined) env[k] = v;
  }
  return env;
}
