import type { ResourceAmount } from '../core/resources.js';
import type { Usage } from './model.js';

/** Agents and summed requests held at once, per scaler and over all (key ''), with their peaks. */
export class UsageBook {
  private readonly now = new Map<string, Usage>();
  private readonly peaks = new Map<string, Usage>();

  add(scalerName: string, r: ResourceAmount, sign: 1 | -1): void {
    for (const key of [scalerName, '']) {
      let u = this.now.get(key);
      if (!u) this.now.set(key, (u = { agents: 0, cpus: 0, memBytes: 0 }));
      u.agents += sign;
      // Back to exactly zero when the last agent leaves: float sums must not drift.
      u.cpus = u.agents ? u.cpus + sign * r.cpus : 0;
      u.memBytes = u.agents ? u.memBytes + sign * r.memBytes : 0;
      let pk = this.peaks.get(key);
      if (!pk) this.peaks.set(key, (pk = { agents: 0, cpus: 0, memBytes: 0 }));
      pk.agents = Math.max(pk.agents, u.agents);
      pk.cpus = Math.max(pk.cpus, u.cpus);
      pk.memBytes = Math.max(pk.memBytes, u.memBytes);
    }
  }

  scalerPeaks(): Record<string, Usage> {
    return Object.fromEntries([...this.peaks].filter(([k]) => k !== ''));
  }

  globalPeak(): Usage {
    return this.peaks.get('') ?? { agents: 0, cpus: 0, memBytes: 0 };
  }
}
