import type { PoolCap } from './ledger-file.js';

/**
 * Whether one more agent fits a machine pool, given what the pool holds. Pure, so the ledger's
 * atomic reserve and the scaler's decision (and with it `scaler explain`) apply one rule.
 */

/** Float sums of fractional cpus (0.1 + 0.2) must not refuse a request that exactly fits. */
const CPU_EPSILON = 1e-9;

export type PoolFit = { ok: true } | { ok: false; reason: string };

export interface PoolLoad {
  cap: PoolCap;
  usedCpu: number;
  usedMemoryBytes: number;
}

export function poolFit(pool: string, load: PoolLoad, cpus: number, memBytes: number): PoolFit {
  const { cap } = load;
  if (cap.maxCpu !== undefined && load.usedCpu + cpus > cap.maxCpu + CPU_EPSILON) {
    return refuse(pool, 'cpu', load.usedCpu, cpus, cap.maxCpu);
  }
  if (cap.maxMemoryBytes !== undefined && load.usedMemoryBytes + memBytes > cap.maxMemoryBytes) {
    return refuse(pool, 'memory', load.usedMemoryBytes, memBytes, cap.maxMemoryBytes);
  }
  return { ok: true };
}

function refuse(pool: string, dim: string, used: number, req: number, cap: number): PoolFit {
  return {
    ok: false,
    reason: `machine pool "${pool}" ${dim} cap exceeded: used ${used} + requested ${req} > cap ${cap}`,
  };
}
