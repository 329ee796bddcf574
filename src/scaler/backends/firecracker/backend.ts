import { logCaptureOf } from '../log-capture.js';
import { normalizeLabelSet, type ScalerEntry } from '../../../config/index.js';
import { systemClock } from '../../../util/clock.js';
import { errorMessage } from '../../../util/errors.js';
import type { Logger } from '../../../util/logger.js';
import { DeterministicSpawnError, SpawnError } from '../../core/spawn-errors.js';
import { HOST_COMPUTE } from '../../backend-capabilities.js';
import type {
  CleanupOrphansOptions,
  DestroyContext,
  InventoryItem,
  LogCapture,
  ManagedAgent,
  RequiredTool,
  ScalerBackend,
  SpawnContext,
  ValidationResult,
} from '../../types.js';
import { refuseIfDiskShort } from './disk-guard.js';
import { guestOrchestratorUrl } from './guest-env.js';
import type { IpLease } from './ip-allocator.js';
import { checkVmReload, guestFilesProblem, vmTools } from './tools.js';
import { reportEarlyExit, startVmTails, TAIL_LINES } from './vm-logs.js';
import { ruleRequestFor, vmLaunchFor } from './launch.js';
import { prepareVmDir, removeVmDir, vmDirFor, writePid } from './vm-dir.js';
import { VmOrphans } from './orphans.js';
import { newTrackedVm, vmContext, vmRecordOf, type TrackedVm, type VmHost } from './tracked.js';
import type { VmBackendOptions } from './options.js';

export type { VmBackendOptions } from './options.js';

const DEFAULT_OVERLAY_MIB = 2048;

/**
 * Agents in micro-VMs: a shared read-only rootfs, a per-VM overlay, one TAP on the configured bridge
 * with a leased address and nft isolation, and a VMM behind the VmmDriver port (firecracker or qemu).
 */
export class VmScalerBackend implements ScalerBackend, VmHost {
  readonly type = 'firecracker' as const;
  readonly capabilities = HOST_COMPUTE;
  readonly name: string;
  private entry: ScalerEntry;
  readonly #vms = new Map<string, TrackedVm>();
  /** The same map, read-only for the orphan sweep: only this class and `trackVm` change it. */
  readonly vms: ReadonlyMap<string, TrackedVm> = this.#vms;
  private readonly stopping = new Map<string, Promise<void>>();
  /** Spawns in flight; true once a destroy() asked for the agent before it was tracked. */
  private readonly spawning = new Map<string, boolean>();
  readonly log: Logger;
  readonly orphans: VmOrphans;

  /** The VM bridge's address on this host: where a guest reaches the orchestrator. */
  get agentGateway(): string {
    return this.opts.network.gateway;
  }

  constructor(readonly opts: VmBackendOptions) {
    this.name = opts.entry.name;
    this.entry = opts.entry;
    this.log = opts.logger.child({ component: 'vm-backend', scaler: this.name, vmm: opts.driver.kind });
    this.orphans = new VmOrphans(this, opts.clock ?? systemClock, opts.sweepIntervalMs);
  }

  /** Start the 15-minute orphan sweep (after the start-up one); shutdownAll stops it. */
  startPeriodicSweep(): void {
    this.orphans.periodic.start();
  }

  private get launchEnv() {
    return { resolvePath: this.opts.resolvePath, hostEnv: this.opts.hostEnv ?? process.env, log: this.log };
  }

  get base(): string {
    return this.opts.resolvePath(this.entry.chrootBaseDir);
  }

  trackVm(t: TrackedVm): void {
    this.#vms.set(t.agent.id, t);
  }

  getActiveCount(): number {
    return this.#vms.size;
  }

  getRequiredTools(entry: ScalerEntry): RequiredTool[] {
    return vmTools(entry, this.opts.resolvePath);
  }

  getLogCapture(agentId: string): LogCapture | undefined {
    const t = this.#vms.get(agentId);
    return t ? logCaptureOf({ kept: () => t.tail.slice(-TAIL_LINES) }) : undefined;
  }

  async spawn(ctx: SpawnContext): Promise<ManagedAgent> {
    // Registered before the first await, so a destroy() that comes at once still finds the spawn.
    this.spawning.set(ctx.agentId, false);
    try {
      return await this.spawnVm(ctx);
    } finally {
      this.spawning.delete(ctx.agentId);
    }
  }

  private async spawnVm(ctx: SpawnContext): Promise<ManagedAgent> {
    const key = normalizeLabelSet(ctx.labelSet);
    const ls = this.entry.labelSets.find((l) => normalizeLabelSet(l.labels) === key);
    if (!ls) throw new SpawnError('config', `label set [${key}] is not served by VM scaler "${this.name}"`);
    if (!ls.rootfsPath) throw new DeterministicSpawnError('config', `label set [${key}] has no rootfsPath`);
    if (this.#vms.size >= this.entry.maxAgents) {
      throw new SpawnError(
        'capacity',
        `VM scaler "${this.name}" is at capacity (${this.#vms.size}/${this.entry.maxAgents})`,
      );
    }
    if (ctx.signal.aborted) throw new SpawnError('spawn-timeout', 'spawn aborted before it started');
    const problem = await guestFilesProblem(ls, this.entry, this.opts.resolvePath);
    if (problem) {
      ctx.onEvent('scaler.failed', problem);
      throw new DeterministicSpawnError('binary-missing', problem);
    }
    if (this.opts.disk)
      await refuseIfDiskShort(ctx, this.base, this.opts.disk, () => this.cleanupOrphans(), this.log);
    const net = this.opts.network;
    ctx.onEvent('scaler.provisioning', 'preparing rootfs and kernel');
    let lease: IpLease;
    try {
      lease = await this.opts.allocator.allocate(ctx.agentId);
    } catch (err) {
      ctx.onEvent('scaler.failed', errorMessage(err));
      throw new SpawnError('capacity', errorMessage(err), { cause: err });
    }
    const dir = vmDirFor(this.base, ctx.agentId);
    const t = newTrackedVm(ctx, lease, dir);
    const agent = t.agent;
    this.trackVm(t);
    try {
      this.abortIfGone(ctx, t);
      const orch = guestOrchestratorUrl(ctx.orchestratorUrl, net.gateway);
      ctx.onEvent('scaler.network', `${lease.ip} on ${net.bridgeName} via ${lease.tap}`);
      const record = vmRecordOf(this.name, t);
      await prepareVmDir(dir, ls.overlayDriveSizeMib ?? DEFAULT_OVERLAY_MIB, this.opts.run, record);
      this.abortIfGone(ctx, t);
      await this.opts.hostNet.addTap(lease.tap, net.bridgeName);
      this.abortIfGone(ctx, t);
      await this.opts.isolation?.apply(
        ruleRequestFor(ctx.agentId, this.name, lease.ip, orch, ls, this.opts.hostServices),
      );
      this.abortIfGone(ctx, t);
      ctx.onEvent('scaler.provisioning', `booting microVM (${this.opts.driver.describe()})`);
      this.startTails(t, ctx);
      const started = await this.opts.driver.start(
        vmLaunchFor({
          ctx,
          ls,
          entry: this.entry,
          dir,
          lease,
          net,
          orchestratorUrl: orch.url,
          ...this.launchEnv,
        }),
      );
      t.pid = started.pid;
      agent.backendRef = String(started.pid);
      await writePid(dir, started.pid);
      void started.exited.then((code) => reportEarlyExit(this.log, ctx, t, code));
      this.abortIfGone(ctx, t);
    } catch (err) {
      const message = err instanceof SpawnError ? err.message : `VM start failed: ${errorMessage(err)}`;
      ctx.onEvent('scaler.failed', message);
      await this.abandon(t);
      if (err instanceof SpawnError) throw err;
      throw new SpawnError('unknown', message, { cause: err });
    }
    agent.state = 'running';
    ctx.onEvent('scaler.ready', `microVM booted (pid ${t.pid}, ${lease.ip})`);
    ctx.onEvent('agent.connecting', 'waiting for the agent in the VM to register');
    return agent;
  }

  /**
   * A failed or abandoned spawn cleans up itself: a destroy() that ran while the spawn was in flight
   * found no VMM yet, so whatever the spawn started after that is removed here.
   */
  private async abandon(t: TrackedVm): Promise<void> {
    t.destroying = true;
    // Only waiting for order: the first destroy reports its own failure.
    await this.stopping.get(t.agent.id)?.catch(() => {});
    if (t.pid !== undefined) await this.opts.driver.stop({ id: t.agent.id, dir: t.dir, pid: t.pid }, 0);
    await Promise.all(t.tails.map((x) => x.stop()));
    await this.removeArtifacts(t.agent.id, t.lease);
    if (this.#vms.get(t.agent.id) === t) this.#vms.delete(t.agent.id);
  }

  private abortIfGone(ctx: SpawnContext, t: TrackedVm): void {
    if (ctx.signal.aborted || t.destroying || this.spawning.get(t.agent.id)) {
      throw new SpawnError('spawn-timeout', 'spawn aborted');
    }
  }

  startTails(t: TrackedVm, ctx: Pick<SpawnContext, 'onEvent'> | undefined): void {
    startVmTails(this.log, t, ctx);
  }

  /** Registering with its token is the agent's acknowledgement of its config: withdraw it. */
  markRegistered(agentId: string): void {
    const t = this.#vms.get(agentId);
    if (!t || t.registered) return;
    t.registered = true;
    const ack = this.opts.driver.configAcknowledged?.({ id: agentId, dir: t.dir });
    // Fire and forget (spec: only warned): a VM being torn down may already be gone.
    ack?.catch((err: unknown) =>
      this.log.warn({ agentId, err: errorMessage(err) }, 'could not withdraw the agent config from the VM'),
    );
  }

  destroy(agentId: string, ctx: DestroyContext): Promise<void> {
    const under = this.stopping.get(agentId);
    if (under) return under;
    const t = this.#vms.get(agentId);
    if (!t) {
      if (this.spawning.has(agentId)) this.spawning.set(agentId, true);
      return Promise.resolve();
    }
    this.log.info({ agentId, reason: ctx.reason, pid: t.pid, ip: t.lease.ip }, 'destroying VM');
    const run = this.teardown(t).finally(() => {
      this.stopping.delete(agentId);
      this.#vms.delete(agentId);
    });
    this.stopping.set(agentId, run);
    return run;
  }

  /**
   * VMM, rules, TAP, directory, then the lease: the lease row is the last record naming the TAP
   * and the rules, so a teardown cut short anywhere is finished by the next orphan sweep.
   */
  private async teardown(t: TrackedVm): Promise<void> {
    t.destroying = true;
    t.agent.state = 'destroying';
    if (t.pid !== undefined)
      await this.opts.driver.stop({ id: t.agent.id, dir: t.dir, pid: t.pid }, this.opts.stopGraceMs ?? 3_000);
    await Promise.all(t.tails.map((x) => x.stop()));
    await this.removeArtifacts(t.agent.id, t.lease);
  }

  /** Everything but the VMM process, in the interrupt-safe order. */
  async removeArtifacts(agentId: string, lease: IpLease | undefined): Promise<void> {
    if (lease) {
      await this.opts.isolation?.remove(lease.ip);
      await this.opts.hostNet.deleteTap(lease.tap);
    }
    await removeVmDir(this.base, agentId);
    if (lease) await this.opts.allocator.release(agentId);
  }

  cleanupOrphans(
    _isRegistered?: (agentId: string) => boolean,
    opts?: CleanupOrphansOptions,
  ): Promise<number> {
    // Liveness of the VMM decides, not registration: a booting VM has not registered yet.
    return this.orphans.sweep(opts);
  }

  inventory(): Promise<InventoryItem[]> {
    return this.orphans.inventory();
  }

  adopt(agentId: string, labelSet: string[], backendRef: string | null): Promise<boolean> {
    return this.orphans.adopt(agentId, labelSet, backendRef);
  }

  reapUnowned(agentId: string): Promise<boolean> {
    return this.orphans.reapUnowned(agentId);
  }

  checkReload(entry: ScalerEntry): ValidationResult {
    return checkVmReload(this.entry, entry);
  }

  applyReload(entry: ScalerEntry): void {
    this.entry = entry;
  }

  async shutdownAll(): Promise<void> {
    await this.orphans.periodic.stop();
    await Promise.allSettled([...this.#vms.keys()].map((id) => this.destroy(id, { reason: 'shutdown' })));
  }

  getScalerContext(agentId: string): Record<string, unknown> | undefined {
    const t = this.#vms.get(agentId);
    return t ? { scalerName: this.name, ...vmContext(t, this.opts.driver, this.opts.network) } : undefined;
  }
}
