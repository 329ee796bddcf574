import type { ResourceCap } from '../../config/index.js';
import type { ResourceAmount } from './resources.js';

export interface CapLimits {
  globalMaxAgents: number;
  globalResourceCap?: ResourceCap | undefined;
  scalers: ReadonlyMap<string, { maxAgents: number; resourceCap?: ResourceCap | undefined }>;
}

export interface Reservation {
  agentId: string;
  scalerName: string;
  requests: ResourceAmount;
  limits: ResourceAmount;
}

export type CapBlocker =
  'global-count' | 'scaler-count' | 'scaler-cpu' | 'scaler-memory' | 'global-cpu' | 'global-memory';

/** Read-only: a refusal may be handed to several callers. */
export type CapCheck =
  { readonly ok: true } | { readonly ok: false; readonly blocker: CapBlocker; readonly reason: string };

/**
 * Count and resource caps over reservations. Pure and synchronous: a reservation is taken and
 * released in memory, so two decisions can never both see the last free slot.
 * Counts compare against max(live agents, reservations): a reservation covers an agent that is still
 * queued for a spawn slot, a live count covers compute the manager adopted without a reservation.
 */
export class CapBook {
  private readonly byAgent = new Map<string, Reservation>();
  private readonly perScaler = new Map<string, { count: number; cpus: number; memBytes: number }>();
  private global = { cpus: 0, memBytes: 0 };
  /** The last global-count refusal, handed out again while the count and the cap are the same. */
  private globalFull: { count: number; max: number; check: CapCheck } | undefined;

  constructor(private limits: CapLimits) {}

  /** An independent copy, for planning without touching the real reservations. */
  clone(): CapBook {
    const c = new CapBook(this.limits);
    for (const r of this.byAgent.values()) c.add(r);
    return c;
  }

  setLimits(limits: CapLimits): void {
    this.limits = limits;
  }

  check(scalerName: string, req: ResourceAmount, live: { global: number; scaler: number }): CapCheck {
    const l = this.limits;
    const globalCount = Math.max(live.global, this.byAgent.size);
    if (globalCount >= l.globalMaxAgents) {
      // Once the global count is full, every group a pass looks at gets this same answer: one
      // object per count, not one per group.
      const last = this.globalFull;
      if (last?.count === globalCount && last.max === l.globalMaxAgents) return last.check;
      const check: CapCheck = {
        ok: false,
        blocker: 'global-count',
        reason: `globalMaxAgents reached (${globalCount}/${l.globalMaxAgents})`,
      };
      this.globalFull = { count: globalCount, max: l.globalMaxAgents, check };
      return check;
    }
    const s = l.scalers.get(scalerName);
    if (!s) return { ok: false, blocker: 'scaler-count', reason: `scaler "${scalerName}" is not configured` };
    const used = this.perScaler.get(scalerName) ?? { count: 0, cpus: 0, memBytes: 0 };
    const scalerCount = Math.max(live.scaler, used.count);
    if (scalerCount >= s.maxAgents) {
      return {
        ok: false,
        blocker: 'scaler-count',
        reason: `scaler "${scalerName}" is at maxAgents (${scalerCount}/${s.maxAgents})`,
      };
    }
    const over = (
      cap: ResourceCap | undefined,
      usage: { cpus: number; memBytes: number },
      who: 'scaler' | 'global',
    ): CapCheck | undefined => {
      if (cap?.maxCpu !== undefined && usage.cpus + req.cpus > cap.maxCpu + 1e-9) {
        return {
          ok: false,
          blocker: `${who}-cpu`,
          reason: `${who === 'scaler' ? `scaler "${scalerName}"` : 'global'} cpu cap: ${fmt(usage.cpus)} used + ${fmt(req.cpus)} requested > ${fmt(cap.maxCpu)}`,
        };
      }
      if (cap?.maxMemoryBytes !== undefined && usage.memBytes + req.memBytes > cap.maxMemoryBytes) {
        return {
          ok: false,
          blocker: `${who}-memory`,
          reason: `${who === 'scaler' ? `scaler "${scalerName}"` : 'global'} memory cap: ${mib(usage.memBytes)} used + ${mib(req.memBytes)} requested > ${mib(cap.maxMemoryBytes)}`,
        };
      }
      return undefined;
    };
    return (
      over(s.resourceCap, used, 'scaler') ?? over(l.globalResourceCap, this.global, 'global') ?? { ok: true }
    );
  }

  /** Check and take in one step. */
  reserve(r: Reservation, live: { global: number; scaler: number }): CapCheck {
    if (this.byAgent.has(r.agentId)) return { ok: true };
    const res = this.check(r.scalerName, r.requests, live);
    if (res.ok) this.add(r);
    return res;
  }

  /** Record a reservation without checking (restart recovery rebuilds usage from stored rows). */
  add(r: Reservation): void {
    if (this.byAgent.has(r.agentId)) return;
    this.byAgent.set(r.agentId, r);
    const u = this.perScaler.get(r.scalerName) ?? { count: 0, cpus: 0, memBytes: 0 };
    u.count += 1;
    u.cpus += r.requests.cpus;
    u.memBytes += r.requests.memBytes;
    this.perScaler.set(r.scalerName, u);
    this.global.cpus += r.requests.cpus;
    this.global.memBytes += r.requests.memBytes;
  }

  /** Idempotent. */
  release(agentId: string): Reservation | undefined {
    const r = this.byAgent.get(agentId);
    if (!r) return undefined;
    this.byAgent.delete(agentId);
    const u = this.perScaler.get(r.scalerName);
    if (u) {
      u.count -= 1;
      u.cpus = Math.max(0, u.cpus - r.requests.cpus);
      u.memBytes = Math.max(0, u.memBytes - r.requests.memBytes);
      // Fractional cpus leave float residue (0.1 + 0.2 - 0.1 - 0.2 ≠ 0); nothing held means zero.
      if (u.count === 0) u.cpus = u.memBytes = 0;
    }
    this.global.cpus = Math.max(0, this.global.cpus - r.requests.cpus);
    this.global.memBytes = Math.max(0, this.global.memBytes - r.requests.memBytes);
    if (this.byAgent.size === 0) this.global = { cpus: 0, memBytes: 0 };
    return r;
  }

  get(agentId: string): Reservation | undefined {
    return this.byAgent.get(agentId);
  }

  count(scalerName?: string): number {
    return scalerName === undefined ? this.byAgent.size : (this.perScaler.get(scalerName)?.count ?? 0);
  }

  usage(scalerName?: string): { cpus: number; memBytes: number } {
    if (scalerName === undefined) return { ...this.global };
    const u = this.perScaler.get(scalerName);
    return { cpus: u?.cpus ?? 0, memBytes: u?.memBytes ?? 0 };
  }

  all(): Reservation[] {
    return [...this.byAgent.values()];
  }
}

function fmt(n: number): string {
  return Number.isInteger(n) ? String(n) : n.toFixed(2);
}
function mib(bytes: number): string {
  return `${Math.round(bytes / 1048576)}MiB`;
}
