import { mirrorResources, parseMemoryString, type ResourceRequest } from '../../config/index.js';

export interface ResourceAmount {
  cpus: number;
  memBytes: number;
}

export interface EffectiveResources {
  /** What caps bill. */
  requests: ResourceAmount;
  /** What the backend enforces. */
  limits: ResourceAmount;
}

export const ZERO: ResourceAmount = Object.freeze({ cpus: 0, memBytes: 0 });

/**
 * Resources cascade job → label set → defaults → 0, field by field and side by side, after a side
 * given alone has been mirrored to the other.
 */
export function resolveResources(
  job: ResourceRequest | undefined,
  labelSet: ResourceRequest | undefined,
  defaults: ResourceRequest | undefined,
): EffectiveResources {
  const chain = [mirrorResources(job), mirrorResources(labelSet), mirrorResources(defaults)];
  const side = (s: 'requests' | 'limits'): ResourceAmount => {
    let cpus: number | undefined;
    let memory: string | undefined;
    for (const r of chain) {
      cpus ??= r?.[s]?.cpus;
      memory ??= r?.[s]?.memory;
    }
    return { cpus: cpus ?? 0, memBytes: memory ? parseMemoryString(memory) : 0 };
  };
  return { requests: side('requests'), limits: side('limits') };
}

export function isZero(r: ResourceAmount): boolean {
  return r.cpus === 0 && r.memBytes === 0;
}
