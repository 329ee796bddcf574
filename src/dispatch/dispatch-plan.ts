import { canonicalizeLabels } from '../config/index.js';
import type { ScalerManager } from '../scaler/manager.js';
import type { ScaleJob } from '../scaler/types.js';
import { CapBook } from '../scaler/core/caps.js';
import { planReconcile, type FreeAgents } from '../scaler/core/plan.js';
import { canAgentRunJob, type ConnectedAgent } from './agent-registry.js';
import type { JobQueue, QueuedJob } from './job-queue.js';

const NO_CAPS = new CapBook({ globalMaxAgents: 0, scalers: new Map() });

/** What the scaler is asked about a queued job: its routing facts, labels canonical. */
export function toScaleJob(job: QueuedJob): ScaleJob {
  return {
    id: job.id,
    runId: job.runId,
    runsOn: job.runsOn,
    resources: job.spec.resources,
    container: job.spec.container,
    role: job.spec.role,
    ...(job.spec.excludeLabels ? { excludeLabels: canonicalizeLabels(job.spec.excludeLabels) } : {}),
  };
}

/**
 * The decision half of a reconcile, synchronous and without I/O: the queue's groups in order, and
 * the pure planner's decision for each (which idle agent takes which job, what to spawn, or why
 * not). The scaler's own decision facts go in, so the plan decides as requestScale and explain do.
 */
export function planDispatch(
  queue: JobQueue,
  idleAgents: readonly ConnectedAgent[] | FreeAgents<ConnectedAgent>,
  scaler: ScalerManager | undefined,
  now: number,
) {
  const groups = queue.orderedGroups().map((g) => {
    const sample = g.first;
    return {
      key: g.key,
      labels: g.labels,
      role: sample.spec.role,
      exclude: sample.spec.excludeLabels ? canonicalizeLabels(sample.spec.excludeLabels) : undefined,
      image: sample.spec.container?.image,
      size: g.size,
      jobIds: function* () {
        for (const j of g.jobs()) yield j.id;
      },
      jobs: g.jobs,
      sample,
    };
  });
  const perScaler = new Map<string, number>();
  for (const b of scaler?.backendList() ?? []) perScaler.set(b.name, b.getActiveCount());
  const facts = scaler?.decisionState();
  const plan = planReconcile({
    groups,
    idleAgents,
    canRun: (a, g) =>
      canAgentRunJob(a, g.sample) &&
      (a.kind !== 'scaler' || !scaler || scaler.agentFits(a.id, toScaleJob(g.sample))),
    table: scaler?.routingTable() ?? [],
    caps: scaler?.capBook() ?? NO_CAPS,
    live: { global: scaler?.globalActiveCount() ?? 0, perScaler },
    backoff: (key) => facts?.backoff(key, now) ?? { blocked: false },
    isProvisioning: (id) => scaler?.isProvisioning(id) ?? false,
    requestsFor: (m, g) => scaler!.resourcesFor(m, toScaleJob(g.sample)).requests,
    scaling: scaler !== undefined,
    ...(facts && {
      now,
      draining: facts.draining,
      hasBackend: facts.hasBackend,
      machinePool: facts.machinePool,
      ...(facts.streak && { streak: facts.streak }),
    }),
  });
  return { groups, plan };
}
