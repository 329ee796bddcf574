import { normalizeLabelSet, type FirecrackerNetwork, type ScalerEntry } from '../../../config/index.js';
import { parseIpv4Cidr } from '../../../config/addresses.js';
import type { AgentIsolation } from '../../../net/isolation.js';
import { errorMessage } from '../../../util/errors.js';
import type { Logger } from '../../../util/logger.js';
import { checkLabelSets } from '../../core/label-set-check.js';
import { DeterministicSpawnError, SpawnError } from '../../core/spawn-errors.js';
import type {
  BackendCapabilities,
  CleanupOrphansOptions,
  DestroyContext,
  LogCapture,
  ManagedAgent,
  RequiredTool,
  ScalerBackend,
  SpawnContext,
  ValidationResult,
} from '../../types.js';
import { guardVolume, type StatfsFn } from './disk-guard.js';
import { buildGuestEnv, guestOrchestratorUrl } from './guest-env.js';
import type { CommandRunner, HostNet } from './host-net.js';
import type { IpAllocator, IpLease } from './ip-allocator.js';
import { bootFailureOf, FileTail } from './log-tail.js';
import { guestFileProblem, vmTools } from './tools.js';
import {
  prepareVmDir,
  readRecord,
  removeVmDir,
  vmDirFor,
  vmFiles,
  writePid,
  type VmRecord,
} from './vm-dir.js';
import { VmOrphans } from './orphans.js';
import type { TrackedVm, VmHost } from './tracked.js';
import type { VmmDriver } from './vmm.js';

export interface VmBackendOptions {
  entry: ScalerEntry;
  network: FirecrackerNetwork;
  driver: VmmDriver;
  allocator: IpAllocator;
  hostNet: HostNet;
  run: CommandRunner;
  /** nft isolation through the shared port; without it VMs reach whatever the bridge routes to. */
  isolation: AgentIsolation | undefined;
  logger: Logger;
  hostEnv?: NodeJS.ProcessEnv;
  /** Relative paths in the entry resolve here. */
  resolvePath: (p: string) => string;
  /** Before each spawn: free space under the VM directory (injected in tests). */
  disk?: { thresholdBytes: number; statfs: StatfsFn };
  stopGraceMs?: number;
}

const TAIL_LINES = 50;
const DEFAULT_OVERLAY_MIB = 2048;

/**
 * Agents in micro-VMs: a shared read-only rootfs, a per-VM overlay, one TAP on the configured bridge
 * with a leased address and nft isolation, and a VMM behind the VmmDriver port (firecracker or qemu).
 */
export class VmScalerBackend implements ScalerBackend, VmHost {
  readonly type = 'firecracker' as const;
  readonly capabilities: BackendCapabilities = {
    localCompute: true,
    lifetime: 'orchestrator',
    cleansOrphans: true,
    capturesLogs: true,
  };
  readonly name: string;
  private entry: ScalerEntry;
  readonly vms = new Map<string, TrackedVm>();
  private readonly stopping = new Map<string, Promise<void>>();
  /** Spawns in flight; true once a destroy() asked for the agent before it was tracked. */
  private readonly spawning = new Map<string, boolean>();
  readonly log: Logger;
  readonly orphans: VmOrphans;

  constructor(readonly opts: VmBackendOptions) {
    this.name = opts.entry.name;
    this.entry = opts.entry;
    this.log = opts.logger.child({ component: 'vm-backend', scaler: this.name, vmm: opts.driver.kind });
    this.orphans = new VmOrphans(this);
  }

  get base(): string {
    return this.opts.resolvePath(this.entry.chrootBaseDir);
  }

  getActiveCount(): number {
    return this.vms.size;
  }

  getRequiredTools(entry: ScalerEntry): RequiredTool[] {
    return vmTools(entry, this.opts.resolvePath);
  }

  getLogCapture(agentId: string): LogCapture | undefined {
    const t = this.vms.get(agentId);
    return t ? { tail: (n = TAIL_LINES) => t.tail.slice(-n) } : undefined;
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
    if (this.vms.size >= this.entry.maxAgents) {
      throw new SpawnError(
        'capacity',
        `VM scaler "${this.name}" is at capacity (${this.vms.size}/${this.entry.maxAgents})`,
      );
    }
    if (ctx.signal.aborted) throw new SpawnError('spawn-timeout', 'spawn aborted before it started');
    const kernelField = ls.kernelPath ? 'labelSets[].kernelPath' : 'kernelPath';
    const guest: [string, string | undefined][] = [
      [kernelField, ls.kernelPath ?? this.entry.kernelPath],
      ['initrdPath', this.entry.initrdPath],
      ['labelSets[].rootfsPath', ls.rootfsPath],
    ];
    for (const [field, p] of guest) {
      const problem = p ? await guestFileProblem(field, this.opts.resolvePath(p)) : undefined;
      if (problem) {
        ctx.onEvent('scaler.failed', problem);
        throw new DeterministicSpawnError('binary-missing', problem);
      }
    }
    await this.checkDisk(ctx);
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
    const agent: ManagedAgent = {
      id: ctx.agentId,
      labelSet: ctx.labelSet,
      backendRef: '',
      spawnedAt: Date.now(),
      state: 'spawning',
    };
    const t: TrackedVm = {
      agent,
      lease,
      dir,
      pid: undefined,
      registered: false,
      destroying: false,
      tails: [],
      tail: [],
    };
    this.vms.set(ctx.agentId, t);
    try {
      this.abortIfGone(ctx, t);
      const orch = guestOrchestratorUrl(ctx.orchestratorUrl, net.gateway);
      ctx.onEvent('scaler.network', `${lease.ip} on ${net.bridgeName} via ${lease.tap}`);
      const record: VmRecord = {
        agentId: ctx.agentId,
        scalerName: this.name,
        labelSet: ctx.labelSet,
        ip: lease.ip,
        tap: lease.tap,
        startedAt: agent.spawnedAt,
      };
      await prepareVmDir(dir, ls.overlayDriveSizeMib ?? DEFAULT_OVERLAY_MIB, this.opts.run, record);
      this.abortIfGone(ctx, t);
      await this.opts.hostNet.addTap(lease.tap, net.bridgeName);
      this.abortIfGone(ctx, t);
      await this.opts.isolation?.apply({
        agentId: ctx.agentId,
        scalerName: this.name,
        ip: lease.ip,
        orchestrator: { address: orch.host, port: orch.port },
        hostAccess: [],
        policy: ls.networkPolicy
          ? { ...ls.networkPolicy, denyAll: ls.networkPolicy.denyAll ?? false }
          : undefined,
      });
      this.abortIfGone(ctx, t);
      const prefix = parseIpv4Cidr(net.cidr)!.prefix;
      const files = vmFiles(dir);
      ctx.onEvent('scaler.provisioning', `booting microVM (${this.opts.driver.describe()})`);
      this.startTails(t, ctx);
      const started = await this.opts.driver.start({
        id: ctx.agentId,
        dir,
        kernel: this.opts.resolvePath(ls.kernelPath ?? this.entry.kernelPath!),
        initrd: this.entry.initrdPath ? this.opts.resolvePath(this.entry.initrdPath) : undefined,
        rootfs: this.opts.resolvePath(ls.rootfsPath),
        overlay: files.overlay,
        vcpus: vcpusFor(ctx, ls.vcpuCount ?? this.entry.vcpuCount),
        memMib: memMibFor(ctx, ls.memSizeMib ?? this.entry.memSizeMib),
        bootArgs: `console=ttyS0 rdinit=/init panic=-1 reboot=t quiet kici.net=${lease.ip},${net.gateway},${prefix}`,
        tap: lease.tap,
        mac: lease.mac,
        ip: lease.ip,
        guestEnv: buildGuestEnv(
          {
            orchestratorUrl: orch.url,
            agentId: ctx.agentId,
            auth: ctx.auth,
            fullLabels: ctx.fullLabels,
            gatewayIp: net.gateway,
          },
          ls,
          this.opts.hostEnv ?? process.env,
          this.log,
        ),
        serialLog: files.serialLog,
        vmmLog: files.vmmLog,
      });
      t.pid = started.pid;
      agent.backendRef = String(started.pid);
      await writePid(dir, started.pid);
      void started.exited.then((code) => this.onExit(ctx, t, code));
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
    await this.stopping.get(t.agent.id)?.catch(() => {});
    if (t.pid !== undefined) await this.opts.driver.stop({ id: t.agent.id, dir: t.dir, pid: t.pid }, 0);
    await Promise.all(t.tails.map((x) => x.stop()));
    await this.removeArtifacts(t.agent.id, t.lease);
    if (this.vms.get(t.agent.id) === t) this.vms.delete(t.agent.id);
  }

  private abortIfGone(ctx: SpawnContext, t: TrackedVm): void {
    if (ctx.signal.aborted || t.destroying || this.spawning.get(t.agent.id)) {
      throw new SpawnError('spawn-timeout', 'spawn aborted');
    }
  }

  /** Refuse a spawn that would fill the disk; the reason reaches the waiting job via scaler.failed. */
  private async checkDisk(ctx: SpawnContext): Promise<void> {
    const disk = this.opts.disk;
    if (!disk) return;
    const res = await guardVolume({
      volume: this.base,
      thresholdBytes: disk.thresholdBytes,
      statfs: disk.statfs,
      reap: () => this.cleanupOrphans(),
      write: (line) => this.log.warn(line),
    });
    if (res.recovered) return;
    const message = `not enough disk space for a VM under ${this.base}: ${res.freeBytesAfter} bytes free after reaping stale VM artifacts, ${disk.thresholdBytes} needed; free space or run kici-admin scaler reap-orphans`;
    ctx.onEvent('scaler.failed', message);
    throw new SpawnError('capacity', message);
  }

  /** Serial console and VMM log, line by line, into our log, the job's timeline and the tail. */
  startTails(t: TrackedVm, ctx: Pick<SpawnContext, 'onEvent'> | undefined): void {
    const files = vmFiles(t.dir);
    for (const [path, source] of [
      [files.serialLog, 'firecracker-serial'],
      [files.vmmLog, 'firecracker-vmm'],
    ] as const) {
      const log = this.log.child({ agentId: t.agent.id, logsSource: source });
      const tail = new FileTail(path, (line) => {
        t.tail.push(line);
        if (t.tail.length > TAIL_LINES) t.tail.shift();
        const failure = bootFailureOf(line);
        if (failure) log.error({ line, failure }, 'VM boot failure');
        else log.debug({ line }, 'vm output');
        ctx?.onEvent('agent.output', `[${source === 'firecracker-serial' ? 'console' : 'vmm'}] ${line}`);
      });
      tail.start();
      t.tails.push(tail);
    }
  }

  private onExit(ctx: SpawnContext, t: TrackedVm, code: number | null): void {
    if (t.registered || t.destroying) return;
    void Promise.all(t.tails.map((x) => x.stop())).then(() => {
      const failure = t.tail.map(bootFailureOf).find(Boolean) ?? 'unknown';
      const last = t.tail.slice(-10).join('\n');
      this.log.error({ agentId: t.agent.id, failure, code }, 'VM boot failed');
      ctx.onEvent(
        'scaler.failed',
        `VM exited (code ${code}, ${failure}) before its agent registered${last ? `\n---\n${last}` : ''}`,
      );
    });
  }

  markRegistered(agentId: string): void {
    const t = this.vms.get(agentId);
    if (t) t.registered = true;
  }

  destroy(agentId: string, ctx: DestroyContext): Promise<void> {
    const under = this.stopping.get(agentId);
    if (under) return under;
    const t = this.vms.get(agentId);
    if (!t) {
      if (this.spawning.has(agentId)) this.spawning.set(agentId, true);
      return Promise.resolve();
    }
    this.log.info({ agentId, reason: ctx.reason, pid: t.pid, ip: t.lease.ip }, 'destroying VM');
    const run = this.teardown(t).finally(() => {
      this.stopping.delete(agentId);
      this.vms.delete(agentId);
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

  adopt(agentId: string, labelSet: string[], backendRef: string | null): Promise<boolean> {
    return this.orphans.adopt(agentId, labelSet, backendRef);
  }

  reapUnowned(agentId: string): Promise<boolean> {
    return this.orphans.reapUnowned(agentId);
  }

  checkReload(entry: ScalerEntry): ValidationResult {
    const errors = [
      ...checkLabelSets(entry.labelSets),
      ...entry.labelSets.flatMap((ls, i) =>
        ls.rootfsPath ? [] : [`labelSets[${i}]: VM label sets need rootfsPath`],
      ),
    ];
    if (entry.type !== this.type)
      errors.push(`type: a ${this.type} backend cannot take a ${entry.type} entry`);
    if (entry.vmm !== this.entry.vmm)
      errors.push(`vmm: changing the VMM (${this.entry.vmm} → ${entry.vmm}) needs a restart`);
    return errors.length ? { valid: false, errors } : { valid: true };
  }

  applyReload(entry: ScalerEntry): void {
    this.entry = entry;
  }

  async shutdownAll(): Promise<void> {
    await Promise.allSettled([...this.vms.keys()].map((id) => this.destroy(id, { reason: 'shutdown' })));
  }

  getScalerContext(agentId: string): Record<string, unknown> | undefined {
    const t = this.vms.get(agentId);
    if (!t) return undefined;
    return {
      backendType: 'firecracker',
      scalerName: this.name,
      vmm: this.opts.driver.describe(),
      pid: t.pid,
      ip: t.lease.ip,
      tap: t.lease.tap,
      mac: t.lease.mac,
      bridge: this.opts.network.bridgeName,
      gateway: this.opts.network.gateway,
      netmask: this.opts.network.netmask,
    };
  }

  /** For `kici-admin firecracker list`: tracked VMs with their place on the host. */
  async listVms(): Promise<
    {
      agentId: string;
      ip: string;
      tap: string;
      pid: number | undefined;
      ageMs: number;
      registered: boolean;
    }[]
  > {
    const out = [];
    for (const t of this.vms.values()) {
      const rec = await readRecord(t.dir);
      out.push({
        agentId: t.agent.id,
        ip: t.lease.ip,
        tap: t.lease.tap,
        pid: t.pid,
        ageMs: Date.now() - (rec?.startedAt ?? t.agent.spawnedAt),
        registered: t.registered,
      });
    }
    return out;
  }
}

/** vCPUs: the effective CPU limit rounded up, else the configured count. */
function vcpusFor(ctx: SpawnContext, fallback: number): number {
  const cpus = ctx.limits?.cpus ?? 0;
  return cpus > 0 ? Math.max(1, Math.ceil(cpus)) : fallback;
}

function memMibFor(ctx: SpawnContext, fallback: number): number {
  const mib = Math.floor((ctx.limits?.memBytes ?? 0) / (1024 * 1024));
  return mib > 0 ? mib : fallback;
}
