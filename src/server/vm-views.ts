/**
 * `GET /api/v1/scaler/vms` (`kici-admin firecracker list`): the micro-VMs this orchestrator holds,
 * with their place on the host. Read through the backend port, so no backend is named here.
 */
import type { Dispatcher } from '../dispatch/dispatcher.js';

export interface VmView {
  scaler: string;
  agentId: string;
  phase: string;
  ip: string | null;
  tap: string | null;
  pid: number | null;
  ageSeconds: number;
  /** Connected to this orchestrator right now. */
  agentConnected: boolean;
  boundJobId: string | null;
}

export function listVms(dispatcher: Dispatcher, nowMs: number): VmView[] {
  const scaler = dispatcher.scaler;
  if (!scaler) return [];
  const backends = new Map(scaler.backendList().map((b) => [b.name, b]));
  const out: VmView[] = [];
  for (const e of scaler.entries()) {
    if (e.type !== 'firecracker') continue;
    const ctx = backends.get(e.scalerName)?.getScalerContext?.(e.agentId) ?? {};
    const str = (v: unknown) => (typeof v === 'string' ? v : null);
    out.push({
      scaler: e.scalerName,
      agentId: e.agentId,
      phase: e.phase,
      ip: str(ctx.ip),
      tap: str(ctx.tap),
      pid: typeof ctx.pid === 'number' ? ctx.pid : null,
      ageSeconds: Math.max(0, Math.round((nowMs - e.createdAtMs) / 1000)),
      agentConnected: dispatcher.registry.get(e.agentId) !== undefined,
      boundJobId: e.boundJobId ?? null,
    });
  }
  return out;
}
