import { canonicalizeLabels } from '../config/index.js';
import type { ScalerManager } from '../scaler/manager.js';
import type { ScaleJob } from '../scaler/types.js';
import { CapBook } from '../scaler/core/caps.js';
import { planReconcile, type FreeAgents } from '../scaler/core/plan.js';
import type { ResourceAmount } from '../scaler/core/resources.js';
import { findLabelSet, type RoutableLabelSet } from '../scaler/core/routing.js';
import { canAgentRunJob, type ConnectedAgent } from './agent-registry.js';
import type { JobQueue, QueueGroup, QueuedJob } from './job-queue.js';

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

/** A queue group as the planner reads it: made once per group, live (size and sample read the queue). */
export interface DispatchGroup {
  key: string;
  /** The queue's group it shows. */
  source: QueueGroup;
  labels: string[];
  role: QueuedJob['spec']['role'];
  exclude: string[] | undefined;
  image: string | undefined;
  readonly size: number;
  jobIds: () => Iterable<string>;
  jobs: () => Iterable<QueuedJob>;
  /** The job the group hands out first; every job of a group routes and fits alike. */
  readonly sample: QueuedJob;
  /** What every job of the group shares for routing and fit: read without reading a job. */
  readonly facts: Pick<QueuedJob, 'runsOn' | 'spec'>;
  /** Where the group routes in `table`, and what one of its agents requests there. */
  routed(table: readonly RoutableLabelSet[], scaler: ScalerManager | undefined): Routed;
}

interface Routed {
  match: RoutableLabelSet | undefined;
  requests?: ResourceAmount | undefined;
}

/**
 * A group's job ids in its dispatch order. A plain iterator, not a generator: a pass starts one per
 * group and mostly reads one id from it, and a generator costs microseconds to start.
 */
class IdsOf implements IterableIterator<string> {
  constructor(private readonly jobs: Iterator<QueuedJob>) {}
  next(): IteratorResult<string> {
    const r = this.jobs.next();
    return r.done ? { done: true, value: undefined } : { done: false, value: r.value.id };
  }
  [Symbol.iterator](): IterableIterator<string> {
    return this;
  }
}

/** Slots in a queue group's memo (`QueueGroup.remember`). */
const PLAN_VIEW = {};

function viewOf(g: QueueGroup): DispatchGroup {
  return g.remember(PLAN_VIEW, makeView);
}

function makeView(g: QueueGroup): DispatchGroup {
  const spec = g.first.spec; // shared by every job of the group (it is part of the group key)
  const exclude = spec.excludeLabels ? canonicalizeLabels(spec.excludeLabels) : undefined;
  // The routing of the group's label combination, worked out once per routing table (a reload
  // builds a new table, and with it new resource defaults), not once per pass.
  let routedIn: readonly RoutableLabelSet[] | undefined;
  let routed: Routed = { match: undefined };
  return {
    key: g.key,
    source: g,
    labels: g.labels,
    role: spec.role,
    exclude,
    image: spec.container?.image,
    get size() {
      return g.size;
    },
    get sample() {
      return g.first;
    },
    facts: { runsOn: g.labels, spec },
    jobIds: () => new IdsOf(g.jobs()[Symbol.iterator]()),
    jobs: g.jobs,
    routed(table, scaler) {
      if (routedIn !== table) {
        const match = findLabelSet(
          { labels: g.labels, role: spec.role, exclude, image: spec.container?.image },
          table,
        );
        routed = {
          match,
          requests: match && scaler?.resourcesFor(match, toScaleJob(g.first)).requests,
        };
        routedIn = table;
      }
      return routed;
    },
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
  const groups = queue.orderedGroups().map(viewOf);
  const perScaler = new Map<string, number>();
  for (const b of scaler?.backendList() ?? []) perScaler.set(b.name, b.getActiveCount());
  const facts = scaler?.decisionState();
  const table = scaler?.routingTable() ?? [];
  const plan = planReconcile({
    groups,
    idleAgents,
    canRun: (a, g) =>
      canAgentRunJob(a, g.sample) &&
      (a.kind !== 'scaler' || !scaler || scaler.agentFits(a.id, toScaleJob(g.sample))),
    table,
    route: (g) => g.routed(table, scaler).match,
    caps: scaler?.capBook() ?? NO_CAPS,
    live: { global: scaler?.globalActiveCount() ?? 0, perScaler },
    backoff: (key) => facts?.backoff(key, now) ?? { blocked: false },
    isProvisioning: (id) => scaler?.isProvisioning(id) ?? false,
    noneProvisioning: !scaler || scaler.provisioningCount() === 0,
    requestsFor: (m, g) => {
      const r = g.routed(table, scaler);
      return r.match === m && r.requests
        ? r.requests
        : scaler!.resourcesFor(m, toScaleJob(g.sample)).requests;
    },
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
