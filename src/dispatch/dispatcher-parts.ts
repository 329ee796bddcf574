import type { GroupCommit } from '../store/group-commit.js';
import type { Logger } from '../util/logger.js';
import { ActiveJobs } from './active-jobs.js';
import type { AgentRegistry } from './agent-registry.js';
import { Claims } from './claims.js';
import { DispatchPass } from './dispatch-pass.js';
import { EarlyProvision } from './early-provision.js';
import type { planDispatch } from './dispatch-plan.js';
import type { DispatcherOptions } from './dispatcher-options.js';
import type { JobQueue } from './job-queue.js';
import type { LogSink } from './log-sink.js';
import { Pump } from './pump.js';
import { RunSubmit } from './run-submit.js';
import type { SealedEnv } from './sealed-env.js';
import type { StaticScopes } from './static-scopes.js';
import { StoreSync } from './store-sync.js';

/** What the dispatcher holds itself and answers, handed to the parts it is made of. */
export interface DispatcherCore {
  log: Logger;
  logs: LogSink;
  writes: GroupCommit;
  queue: JobQueue;
  registry: AgentRegistry;
  sealed: SealedEnv;
  staticScopes: StaticScopes;
  reconnectGraceMs: number;
  /** Ask for a dispatch pass. */
  pump: () => void;
  /** One reconcile pass (the dispatcher's own, which a bench times directly). */
  pass: () => Promise<void>;
  /** The decision half of a reconcile (the dispatcher's own `plan`). */
  plan: () => ReturnType<typeof planDispatch>;
  refreshStaticScopes: () => Promise<void>;
  stopped: () => boolean;
  /** Stopping or draining. */
  ending: () => boolean;
  /** Stopping, draining, or told to hold new work: nothing new is handed out. */
  halted: () => boolean;
}

/** The dispatcher's collaborators, each given only what it needs. */
export interface DispatcherParts {
  active: ActiveJobs;
  claims: Claims;
  sync: StoreSync;
  submits: RunSubmit;
  pump: Pump;
  passes: DispatchPass;
}

/**
 * Make the dispatcher's parts and wire them to each other: the active set first (claims hand it
 * their jobs), then the claims, which ride on the group commit of the results, then the rest.
 */
export function assembleDispatcherParts(opts: DispatcherOptions, core: DispatcherCore): DispatcherParts {
  const { log, logs, writes, queue, registry, sealed } = core;
  const active = new ActiveJobs({
    store: opts.store,
    clock: opts.clock,
    log,
    writes,
    logs,
    queue,
    registry,
    observer: opts.observer,
    instanceId: opts.instanceId,
    reconnectGraceMs: core.reconnectGraceMs,
    timeoutBackstopMs: opts.timeoutBackstopMs ?? 30_000,
    pump: core.pump,
    stopped: core.stopped,
  });
  const claims = new Claims({
    store: opts.store,
    writes,
    queue,
    registry,
    active,
    scaler: opts.scaler,
    clock: opts.clock,
    log,
    instanceId: opts.instanceId,
    pump: core.pump,
    halted: core.halted,
    stopped: core.stopped,
    sealed,
    logs,
  });
  const sync = new StoreSync({
    store: opts.store,
    clock: opts.clock,
    log,
    queue,
    active,
    logs,
    sealed,
    claims,
    observer: opts.observer,
    instanceId: opts.instanceId,
    peerAlive: opts.peerAlive,
    refreshStaticScopes: core.refreshStaticScopes,
    pump: core.pump,
  });
  writes.rideOnResults((finished) => claims.rideOnResults(finished));
  const pump = new Pump({ pass: core.pass, held: core.halted, ending: core.ending, log });
  const early = new EarlyProvision({
    queue,
    registry,
    scaler: opts.scaler,
    clock: opts.clock,
    log,
    clustered: opts.instanceId !== undefined || opts.scaleClaim !== undefined,
    halted: core.halted,
    passing: () => pump.busy,
  });
  const submits = new RunSubmit({
    store: opts.store,
    clock: opts.clock,
    log,
    queue,
    claims,
    sealed,
    instanceId: opts.instanceId,
    claimAtSubmit: opts.claimAtSubmit,
    pump: core.pump,
    early,
  });
  const passes = new DispatchPass({
    store: opts.store,
    clock: opts.clock,
    log,
    queue,
    registry,
    claims,
    scaler: opts.scaler,
    staticScopes: core.staticScopes,
    observer: opts.observer,
    instanceId: opts.instanceId,
    scaleClaim: opts.scaleClaim,
    peersCould: opts.peersCould,
    refreshPeers: opts.refreshPeers,
    startedAtMs: opts.clock.now(),
    plan: core.plan,
    refreshStaticScopes: core.refreshStaticScopes,
    ending: core.ending,
    again: () => pump.again(),
  });
  return { active, claims, sync, submits, pump, passes };
}
