import type { JobSpec } from '../jobs/run-spec.js';
import type { JobObserver } from './active-job.js';

/**
 * Environment values a job gets only when it is handed to its agent, never stored: a provisioning
 * job's payload holds a claim code, and the store (its backups, its readers, the API) must only
 * ever see the code's hash. The values live in the memory of the orchestrator that submitted the
 * job, so only that orchestrator dispatches it; the stored spec names the variables (`sealedEnv`)
 * so every other instance knows to leave the job alone.
 */
export interface Sealed {
  env: Record<string, string>;
  /** Values masked in the job's log besides its env values (e.g. the claim code on its own). */
  mask: string[];
}

/**
 * The stored spec of a job with sealed values: the names only, under a key no run file may set, and
 * in a cluster the instance holding the values.
 */
export type SealedSpec = JobSpec & { sealedEnv?: string[]; sealedBy?: string };

export function sealedNames(spec: unknown): string[] {
  const names = (spec as SealedSpec | undefined)?.sealedEnv;
  return Array.isArray(names) ? names : [];
}

/** The instance that holds a sealed job's values (clustering), when the spec names one. */
export function sealedHolder(spec: unknown): string | undefined {
  const by = (spec as SealedSpec | undefined)?.sealedBy;
  return typeof by === 'string' ? by : undefined;
}

export class SealedEnv {
  private readonly held = new Map<string, Sealed>();

  hold(jobId: string, sealed: Sealed): void {
    this.held.set(jobId, sealed);
  }

  get(jobId: string): Sealed | undefined {
    return this.held.get(jobId);
  }

  /** Whether this instance may hand the job out: it has no sealed values, or this instance holds them. */
  canDispatch(jobId: string, spec: unknown): boolean {
    return sealedNames(spec).length === 0 || this.held.has(jobId);
  }

  /** The job reached its final state: the values are never needed again. */
  forget(jobId: string): void {
    this.held.delete(jobId);
  }

  /** `inner`, and a job's values forgotten as soon as it is told the job is final. */
  forgetOnFinish(inner: JobObserver | undefined): JobObserver {
    return {
      jobStarted: (...a) => inner?.jobStarted(...a),
      jobFinished: (jobId, result, nowMs) => {
        this.forget(jobId);
        inner?.jobFinished(jobId, result, nowMs);
      },
      ...(inner?.jobRunningStored && { jobRunningStored: inner.jobRunningStored.bind(inner) }),
    };
  }
}
