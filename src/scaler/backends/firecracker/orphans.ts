import { access, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { CleanupOrphansOptions, InventoryItem, ManagedAgent } from '../../types.js';
import { systemClock, type Clock } from '../../../util/clock.js';
import { readProcFile } from '../../../util/proc-tree.js';
import { PeriodicSweep, VM_ORPHAN_SWEEP_INTERVAL_MS } from './periodic-sweep.js';
import type { VmHost } from './tracked.js';
import { VM_TAP_PATTERN } from './host-net.js';
import type { IpLease } from './ip-allocator.js';
import { listVmIds, readPid, readRecord, removeVmDir, vmDirFor } from './vm-dir.js';
import { killAndWait, pidAlive } from './vm-process.js';

/**
 * Restart recovery and the orphan sweep, from host-local evidence: VM directories (record + pid
 * file), TAP names and the lease table. Liveness decides; a running VMM is never touched here.
 */
export class VmOrphans {
  private sweeping: Promise<number> | undefined;
  /** The 15-minute sweep, started by the backend once its start-up sweep is done. */
  readonly periodic: PeriodicSweep;

  constructor(
    private readonly b: VmHost,
    clock: Clock = systemClock,
    intervalMs = VM_ORPHAN_SWEEP_INTERVAL_MS,
  ) {
    this.periodic = new PeriodicSweep(clock, intervalMs, () => this.sweep(), b.log);
  }

  /** Ids whose VM directory names a VMM process that is still running (confirmed or not). */
  private async liveIds(): Promise<Set<string>> {
    const live = new Set(this.b.vms.keys());
    // A VMM whose pid file was never written (a crash right after it started) still names its
    // directory on its command line.
    for (const id of await vmIdsInProcesses(join(this.b.base, 'firecracker'))) live.add(id);
    for (const id of await listVmIds(this.b.base)) {
      const pid = await readPid(vmDirFor(this.b.base, id));
      if (pid !== undefined && (await pidAlive(pid))) live.add(id);
    }
    return live;
  }

  /** Re-entrancy guarded: a sweep already under way is shared. */
  sweep(opts: CleanupOrphansOptions = {}): Promise<number> {
    if (opts.dryRun) return this.runSweep(opts);
    this.sweeping ??= this.runSweep(opts).finally(() => (this.sweeping = undefined));
    return this.sweeping;
  }

  private async runSweep(opts: CleanupOrphansOptions): Promise<number> {
    const { allocator, hostNet, isolation } = this.b.opts;
    const live = await this.liveIds();
    let count = 0;
    /** Report it, and act unless this is a dry run. */
    const item = async (agentId: string | null, ref: string, reason: string, act: () => Promise<unknown>) => {
      opts.onItem?.({ agentId, ref, reason });
      if (!opts.dryRun) await act();
      count++;
    };
    // 1. Leases of this scaler whose VM is gone: the lease names the TAP and the rules.
    const leases = await allocator.getAllocations();
    for (const l of leases) {
      if (l.scalerName !== this.b.name || live.has(l.vmId)) continue;
      await item(l.vmId, `${l.ip} ${l.tap}`, 'IP lease of a VM that is not running', () =>
        this.b.removeArtifacts(l.vmId, l),
      );
    }
    // 2. Directories of dead VMs with no lease left.
    const leased = new Set((await allocator.getAllocations()).map((l) => l.vmId));
    for (const id of await listVmIds(this.b.base)) {
      if (live.has(id) || leased.has(id)) continue;
      const rec = await readRecord(vmDirFor(this.b.base, id));
      await item(id, vmDirFor(this.b.base, id), 'directory of a VM that is not running', async () => {
        if (rec?.tap && VM_TAP_PATTERN.test(rec.tap)) await hostNet.deleteTap(rec.tap);
        await removeVmDir(this.b.base, id);
      });
    }
    // 3. Our TAP names with no lease and no live VM; re-read leases after listing (allocate races).
    const taps = this.b.opts.sweepsUnleasedTaps === false ? [] : await hostNet.listTaps();
    const after = await allocator.getAllocations();
    const keep = new Set([
      ...after.map((l) => l.tap),
      ...[...this.b.vms.values()].map((t) => t.lease.tap),
      // A running VM's own record names its TAP: with leases only in memory (a sweep while the
      // orchestrator is down) this is what keeps a live VM's network.
      ...(await this.recordedTaps(live)),
    ]);
    for (const tap of taps) {
      if (keep.has(tap) || tap === this.b.opts.network.bridgeName) continue;
      await item(null, tap, 'VM TAP device with no lease and no running VM', () => hostNet.deleteTap(tap));
    }
    // 4. Rules for addresses no live VM (of any scaler on this bridge) holds.
    if (isolation) {
      const held = new Set([
        ...after.filter((l) => l.scalerName !== this.b.name || live.has(l.vmId)).map((l) => l.ip),
        ...[...this.b.vms.values()].map((t) => t.lease.ip),
      ]);
      if (opts.dryRun) {
        for (const ip of await isolation.listRuled()) {
          if (!held.has(ip))
            await item(null, ip, 'firewall rules for an address no VM holds', async () => {});
        }
      } else count += await isolation.reapStale(held);
    }
    if (count) this.b.log.info({ reaped: count }, 'reaped stale VM artifacts');
    return count;
  }

  private async recordedTaps(ids: Iterable<string>): Promise<string[]> {
    const taps: string[] = [];
    for (const id of ids) {
      let dir: string;
      try {
        dir = vmDirFor(this.b.base, id);
      } catch {
        continue; // an id read off a command line that cannot name a VM directory
      }
      const tap = (await readRecord(dir))?.tap;
      if (tap) taps.push(tap);
    }
    return taps;
  }

  /**
   * For the scaler audit: running VMs, this scaler's TAPs and rule sets (by lease), and TAPs or rule
   * sets no lease of any scaler accounts for.
   */
  async inventory(): Promise<InventoryItem[]> {
    const { allocator, hostNet, isolation } = this.b.opts;
    const items: InventoryItem[] = [...(await this.liveIds())].map((id) => ({
      kind: 'vm' as const,
      agentId: id,
      ref: vmDirFor(this.b.base, id),
    }));
    const leases = await allocator.getAllocations();
    const byTap = new Map(leases.map((l) => [l.tap, l]));
    const byIp = new Map(leases.map((l) => [l.ip, l]));
    for (const tap of await hostNet.listTaps()) {
      if (tap === this.b.opts.network.bridgeName) continue;
      const l = byTap.get(tap);
      if (!l) items.push({ kind: 'tap', agentId: null, ref: tap });
      else if (l.scalerName === this.b.name) items.push({ kind: 'tap', agentId: l.vmId, ref: tap });
    }
    for (const ip of isolation ? await isolation.listRuled() : []) {
      const l = byIp.get(ip);
      if (!l) items.push({ kind: 'rules', agentId: null, ref: ip });
      else if (l.scalerName === this.b.name) items.push({ kind: 'rules', agentId: l.vmId, ref: ip });
    }
    return items;
  }

  async adopt(agentId: string, labelSet: string[], backendRef: string | null): Promise<boolean> {
    let dir: string;
    try {
      dir = vmDirFor(this.b.base, agentId);
      await access(dir);
    } catch (err) {
      // No VM directory is proof the VM is gone; any other failure (EACCES, EIO) proves nothing.
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === undefined) return false;
      throw new Error(`cannot read the VM directory of ${agentId} (${code})`, { cause: err });
    }
    const pid = (await readPid(dir)) ?? (Number(backendRef) || 0);
    if (!(await this.b.opts.driver.owns(pid, dir))) return false;
    const rec = await readRecord(dir);
    const lease: IpLease | undefined =
      (await this.b.opts.allocator.getAllocationForVm(agentId)) ??
      (rec ? await this.b.opts.allocator.allocate(agentId) : undefined);
    if (!lease || (rec && lease.ip !== rec.ip)) return false;
    const agent: ManagedAgent = {
      id: agentId,
      labelSet,
      backendRef: String(pid),
      spawnedAt: rec?.startedAt ?? Date.now(),
      state: 'running',
    };
    const t = { agent, lease, dir, pid, registered: true, destroying: false, tails: [], tail: [] };
    this.b.trackVm(t);
    this.b.startTails(t, undefined);
    this.b.log.info({ agentId, pid, ip: lease.ip }, 'adopted a running VM');
    return true;
  }

  /** Only with this host's VM directory as proof; kills a confirmed VMM, then removes the rest. */
  async reapUnowned(agentId: string): Promise<boolean> {
    if (this.b.vms.has(agentId)) return false;
    let dir: string;
    try {
      dir = vmDirFor(this.b.base, agentId);
      await access(dir);
    } catch {
      return false;
    }
    const pid = await readPid(dir);
    if (pid !== undefined && (await this.b.opts.driver.owns(pid, dir))) await killAndWait(pid);
    const lease = await this.b.opts.allocator.getAllocationForVm(agentId);
    const rec = await readRecord(dir);
    if (lease && lease.scalerName === this.b.name) {
      await this.b.removeArtifacts(agentId, lease);
    } else {
      if (rec?.tap && VM_TAP_PATTERN.test(rec.tap)) await this.b.opts.hostNet.deleteTap(rec.tap);
      if (rec?.ip && rec.scalerName === this.b.name) await this.b.opts.isolation?.remove(rec.ip);
      await removeVmDir(this.b.base, agentId);
    }
    return true;
  }
}

/** Agent ids whose VM directory under `root` appears on some running process's command line. */
async function vmIdsInProcesses(root: string): Promise<Set<string>> {
  const ids = new Set<string>();
  const prefix = root + '/';
  // Without /proc (not Linux) no VMM can be found this way. The reads are proc-tree's synchronous
  // ones into its shared buffer, with a turn every 256 processes: the audit runs this often.
  let n = 0;
  for (const name of await readdir('/proc').catch(() => [])) {
    if (!/^\d+$/.test(name)) continue;
    if (++n % 256 === 0) await new Promise((r) => setImmediate(r));
    let cmd: string;
    try {
      cmd = readProcFile(`/proc/${name}/cmdline`, 'utf8');
    } catch {
      continue; // gone since the listing
    }
    for (const arg of cmd.split('\0')) {
      const at = arg.indexOf(prefix);
      if (at >= 0) ids.add(arg.slice(at + prefix.length).split('/')[0]!);
    }
  }
  return ids;
}
