/**
 * The VM backend's only way to a hypervisor. The backend prepares everything host-side (lease, TAP,
 * overlay, credentials) and a driver turns it into a running VM; the driver is passed in.
 */

/** Everything one VM needs; every path is inside `dir`, the VM's host-local directory. */
export interface VmLaunch {
  id: string;
  /** The VM's directory: the only host-local proof it exists, and what recovery works from. */
  dir: string;
  kernel: string;
  initrd: string | undefined;
  /** Shared by every VM, attached read-only. */
  rootfs: string;
  /** This VM's writable copy-on-write layer (an ext4 image). */
  overlay: string;
  vcpus: number;
  memMib: number;
  /** Network and boot settings for the guest; never secrets (they are visible in `ps` with qemu). */
  bootArgs: string;
  tap: string;
  mac: string;
  ip: string;
  /** The agent's environment as shell assignments, handed over privately (config drive or MMDS). */
  guestEnv: string;
  /** Guest serial console and VMM diagnostics; both are tailed into the agent's log. */
  serialLog: string;
  vmmLog: string;
}

export interface StartedVm {
  pid: number;
  /** Settles when the VMM process exits (only known for VMMs this process started). */
  exited: Promise<number | null>;
}

export interface VmmDriver {
  readonly kind: 'firecracker' | 'qemu';
  /** What the driver runs on, for the start-up log ("qemu TCG (software)", "firecracker"). */
  describe(): string;
  /** Start the VM. Rejects (with nothing left running) when the VMM cannot be started. */
  start(vm: VmLaunch): Promise<StartedVm>;
  /**
   * Stop the VM: a guest-visible shutdown where the VMM has one, then SIGKILL after `graceMs`.
   * Only signals `pid` when it is provably this VM's VMM.
   */
  stop(vm: { id: string; dir: string; pid: number }, graceMs: number): Promise<void>;
  /**
   * The guest agent has its configuration (it registered with its token): withdraw the credentials
   * from wherever the driver handed them over, as far as the VMM allows.
   */
  configAcknowledged?(vm: { id: string; dir: string }): Promise<void>;
  /** Is `pid` this VM's VMM (and not a recycled pid)? */
  owns(pid: number, dir: string): Promise<boolean>;
}
