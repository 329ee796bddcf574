/**
 * Test harness for the ScalerManager: a recording backend whose every spawn the test settles by
 * hand, and a builder that wires a real ScalerManager (manual clock, real PGlite store) to a real
 * Dispatcher the way `src/server/orchestrator.ts` does, with fake connected agents that behave like
 * `src/server/agent-socket.ts`.
 */
import { sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import {
  canonicalizeLabels,
  normalizeLabelSet,
  scalerFileSchema,
  type LabelSetConfig,
  type ScalerConfig,
  type ScalerConfigInput,
  type ScalerEntry,
  type ScalerType,
} from '../../src/config/index.js';
import { newConnectedAgent, type ConnectedAgent } from '../../src/dispatch/agent-registry.js';
import { Dispatcher } from '../../src/dispatch/dispatcher.js';
import { runSpecSchema } from '../../src/jobs/run-spec.js';
import { AgentSession, type AgentSessionDeps } from '../../src/server/agent-session.js';
import { SELF_REPORTED_PREFIXES, type OrchestratorMessage } from '../../src/protocol/messages.js';
import type { ProvisionBackoffOptions } from '../../src/scaler/core/backoff.js';
import { SpawnError, type ClassifiedSpawnError } from '../../src/scaler/core/spawn-errors.js';
import type { MachineLedger } from '../../src/scaler/ledger/machine-ledger.js';
import { RegistrationRefused, ScalerManager, type RegistrationResult } from '../../src/scaler/manager.js';
import type { BackendFactory } from '../../src/scaler/reload.js';
import { checkLabelSets } from '../../src/scaler/core/label-set-check.js';
import type {
  BackendCapabilities,
  DestroyContext,
  DestroyReason,
  ManagedAgent,
  RequiredTool,
  ScalerBackend,
  ScalerEventType,
  SpawnContext as SpawnRequest,
  ValidationResult,
} from '../../src/scaler/types.js';
import type { Store } from '../../src/store/index.js';
import { ManualClock } from '../../src/util/clock.js';
import type { Logger } from '../../src/util/logger.js';
import { freshStore } from './data-dir.js';

// ---------------------------------------------------------------------------------------------
// Config helpers

/** Parse a scaler file the way the loader does (defaults applied, rules checked). */
export function scalerConfig(input: ScalerConfigInput | Record<string, unknown>): ScalerConfig {
  return scalerFileSchema.parse(input);
}

/** A bare-metal entry input with the fields every test needs; `labelSets` may be plain label lists. */
export function bareMetal(
  name: string,
  labelSets: (string[] | Record<string, unknown>)[],
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    name,
    type: 'bare-metal',
    maxAgents: 10,
    labelSets: labelSets.map((ls) =>
      Array.isArray(ls)
        ? { labels: ls, binaryPath: '/opt/kici/agent' }
        : { binaryPath: '/opt/kici/agent', ...ls },
    ),
    ...extra,
  };
}

/** The token a spawn request carries (the manager always spawns with a token). */
export function spawnToken(req: SpawnRequest): string {
  if (req.auth.kind !== 'token') throw new Error(`spawn of ${req.agentId} carries a claim code, not a token`);
  return req.auth.token;
}

// ---------------------------------------------------------------------------------------------
// RecordingBackend

/**
 * Compute as the "host" sees it, independent of any backend's bookkeeping: what the contract
 * suite inspects, and what a second backend instance (after a restart) finds again.
 */
export class FakeHost {
  readonly compute = new Map<string, { owner: string }>();
  /** How many times each agent's compute was actually removed. */
  readonly removals = new Map<string, number>();
  remove(agentId: string): void {
    if (!this.compute.delete(agentId)) return;
    this.removals.set(agentId, (this.removals.get(agentId) ?? 0) + 1);
  }
  owned(owner: string): string[] {
    return [...this.compute].filter(([, c]) => c.owner === owner).map(([id]) => id);
  }
}

interface Pending {
  req: SpawnRequest;
  settled: boolean;
  resolve(agent: ManagedAgent): void;
  reject(err: unknown): void;
}

export interface BackendAgent {
  id: string;
  state: 'spawning' | 'running';
  registered: boolean;
  req?: SpawnRequest;
  adopted: boolean;
}

/**
 * A ScalerBackend that records everything and lets the test decide how each spawn ends: resolve
 * it, fail it, let it hang until the manager's deadline aborts it, or resolve it and then report
 * the agent process as exited before registering (`emitFailed`).
 */
export class RecordingBackend implements ScalerBackend {
  readonly type: ScalerType;
  readonly capabilities: BackendCapabilities;
  readonly name: string;
  /** The entry this backend was built from or last reloaded with. */
  entry: ScalerEntry;
  get labelSets(): LabelSetConfig[] {
    return this.entry.labelSets;
  }
  get maxAgents(): number {
    return this.entry.maxAgents;
  }
  /** Where this backend's compute lives; shared with a "restarted" backend in the contract suite. */
  readonly host: FakeHost;
  /** With a shared host, adopt and reapUnowned answer from it instead of the adoptResult/reapResult knobs. */
  private readonly hostDecides: boolean;
  requiredTools: RequiredTool[] = [];

  /** Every spawn request, in call order. */
  readonly spawns: SpawnRequest[] = [];
  readonly destroys: { agentId: string; reason: DestroyReason; known: boolean }[] = [];
  /** Entries applied by applyReload, in order. */
  readonly applied: ScalerEntry[] = [];
  /** checkReload calls (what the manager asked, and the answer). */
  readonly reloads: {
    labelSets: LabelSetConfig[];
    maxAgents: number | undefined;
    entry: ScalerEntry | undefined;
    valid: boolean;
  }[] = [];
  readonly adopts: { agentId: string; labelSet: string[]; backendRef: string }[] = [];
  readonly reaps: { agentId: string; backendRef: string | null }[] = [];
  readonly aborted: string[] = [];
  readonly registeredMarks: string[] = [];
  shutdownCalls = 0;
  /** Compute this backend holds (spawning agents included). */
  readonly agents = new Map<string, BackendAgent>();
  private readonly pending = new Map<string, Pending>();
  /** spawn() calls that have not settled yet, and the most ever seen at once. */
  inFlight = 0;
  maxInFlight = 0;

  // Knobs a test may turn.
  /** Errors this backend's next reloads report (it then applies nothing). */
  refuseReload: string[] | undefined;
  adoptResult: boolean | ((agentId: string) => boolean) = false;
  reapResult = false;
  /** Model a non-abortable backend call: the spawn ignores its abort signal. */
  ignoreAbort = false;
  /** Compute the backend counts although the manager holds no reservation for it. */
  extraActive = 0;
  /** Resolve every spawn on the next microtask (for tests that do not care about spawn timing). */
  autoResolve = false;
  /** Hold every destroy() until releaseDestroys() (a teardown that takes its time). */
  holdDestroys = false;
  private held: (() => void)[] = [];
  /** Called after destroy() removed compute the backend knew (the harness uses it to drop the agent's socket). */
  onDestroyed: ((agentId: string) => void) | undefined;

  constructor(
    entry: ScalerEntry,
    opts: { host?: FakeHost; lifetime?: BackendCapabilities['lifetime'] } = {},
  ) {
    this.entry = entry;
    this.name = entry.name;
    this.type = entry.type;
    this.host = opts.host ?? new FakeHost();
    this.hostDecides = opts.host !== undefined;
    this.capabilities = {
      localCompute: true,
      lifetime: opts.lifetime ?? 'orchestrator',
      cleansOrphans: false,
      capturesLogs: false,
      peerAdoptable: false,
    };
  }

  getRequiredTools(): RequiredTool[] {
    return this.requiredTools;
  }

  getActiveCount(): number {
    return this.agents.size + this.extraActive;
  }

  spawn(req: SpawnRequest): Promise<ManagedAgent> {
    this.spawns.push(req);
    const key = normalizeLabelSet(req.labelSet);
    if (!this.labelSets.some((ls) => normalizeLabelSet(ls.labels) === key)) {
      return Promise.reject(new SpawnError('config', `label set [${key}] is not served by "${this.name}"`));
    }
    if (req.signal.aborted) return Promise.reject(req.signal.reason);
    this.host.compute.set(req.agentId, { owner: this.name });
    this.agents.set(req.agentId, {
      id: req.agentId,
      state: 'spawning',
      registered: false,
      req,
      adopted: false,
    });
    this.inFlight += 1;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    return new Promise<ManagedAgent>((resolve, reject) => {
      const p: Pending = {
        req,
        settled: false,
        resolve: (a) => {
          if (p.settled) return;
          p.settled = true;
          this.inFlight -= 1;
          this.pending.delete(req.agentId);
          resolve(a);
        },
        reject: (err) => {
          if (p.settled) return;
          p.settled = true;
          this.inFlight -= 1;
          this.pending.delete(req.agentId);
          reject(err);
        },
      };
      this.pending.set(req.agentId, p);
      req.signal.addEventListener(
        'abort',
        () => {
          if (p.settled || this.ignoreAbort) return;
          this.aborted.push(req.agentId);
          this.agents.delete(req.agentId);
          this.host.remove(req.agentId);
          p.reject(req.signal.reason ?? new Error('spawn aborted'));
        },
        { once: true },
      );
      if (this.autoResolve)
        queueMicrotask(() => this.pending.has(req.agentId) && this.resolveSpawn(req.agentId));
    });
  }

  /** Spawn calls in flight (admitted by the manager's semaphore, not yet settled), oldest first. */
  pendingIds(): string[] {
    return [...this.pending.keys()];
  }

  /** Agents whose spawn succeeded and that have not registered yet. */
  startedIds(): string[] {
    return [...this.agents.values()].filter((a) => a.state === 'running' && !a.registered).map((a) => a.id);
  }

  requestFor(agentId: string): SpawnRequest | undefined {
    return this.spawns.findLast((r) => r.agentId === agentId);
  }

  resolveSpawn(agentId: string): void {
    const p = this.pending.get(agentId);
    if (!p) throw new Error(`backend "${this.name}": no spawn of ${agentId} is in flight`);
    const a = this.agents.get(agentId);
    if (a) a.state = 'running';
    p.resolve({
      id: agentId,
      labelSet: p.req.labelSet,
      backendRef: `rec:${agentId}`,
      spawnedAt: 0,
      state: 'running',
    });
  }

  failSpawn(agentId: string, err: unknown): void {
    const p = this.pending.get(agentId);
    if (!p) throw new Error(`backend "${this.name}": no spawn of ${agentId} is in flight`);
    this.agents.delete(agentId);
    this.host.remove(agentId);
    p.reject(err);
  }

  /** The agent process exited before it registered: the compute is gone and the backend says so. */
  emitFailed(agentId: string, detail: string): void {
    const req = this.requestFor(agentId);
    if (!req) throw new Error(`backend "${this.name}": never spawned ${agentId}`);
    this.agents.delete(agentId);
    this.host.remove(agentId);
    req.onEvent('scaler.failed', detail);
  }

  emit(agentId: string, type: ScalerEventType, detail: string): void {
    this.requestFor(agentId)?.onEvent(type, detail);
  }

  destroy(agentId: string, ctx: DestroyContext): Promise<void> {
    const known = this.agents.has(agentId);
    this.destroys.push({ agentId, reason: ctx.reason, known });
    this.agents.delete(agentId);
    if (known) this.host.remove(agentId);
    this.pending.get(agentId)?.reject(new Error('destroyed while spawning'));
    if (known) this.onDestroyed?.(agentId);
    return this.holdDestroys ? new Promise<void>((r) => this.held.push(r)) : Promise.resolve();
  }

  /** Let every held destroy() finish. */
  releaseDestroys(): void {
    for (const r of this.held.splice(0)) r();
  }

  destroyedIds(): string[] {
    return this.destroys.map((d) => d.agentId);
  }

  markRegistered(agentId: string): void {
    this.registeredMarks.push(agentId);
    const a = this.agents.get(agentId);
    if (a) a.registered = true;
  }

  reapUnowned(agentId: string, backendRef: string | null): Promise<boolean> {
    this.reaps.push({ agentId, backendRef });
    if (!this.hostDecides) return Promise.resolve(this.reapResult);
    // Only compute this scaler started and no longer tracks; anyone else's is left alone.
    if (this.agents.has(agentId) || this.host.compute.get(agentId)?.owner !== this.name)
      return Promise.resolve(false);
    this.host.remove(agentId);
    return Promise.resolve(true);
  }

  adopt(agentId: string, labelSet: string[], backendRef: string | null): Promise<boolean> {
    this.adopts.push({ agentId, labelSet, backendRef: backendRef ?? '' });
    const ok = this.hostDecides
      ? this.host.compute.get(agentId)?.owner === this.name
      : typeof this.adoptResult === 'function'
        ? this.adoptResult(agentId)
        : this.adoptResult;
    if (ok) this.agents.set(agentId, { id: agentId, state: 'running', registered: false, adopted: true });
    return Promise.resolve(ok);
  }

  /** Checks like the real bare-metal backend (shared label-set rules; binaryPath or image); changes nothing. */
  checkReload(entry: ScalerEntry): ValidationResult {
    const errors = [
      ...checkLabelSets(entry.labelSets),
      ...entry.labelSets.flatMap((ls, i) =>
        ls.binaryPath || ls.image ? [] : [`labelSets[${i}]: needs binaryPath or image`],
      ),
    ];
    if (this.refuseReload) errors.push(...this.refuseReload);
    this.reloads.push({
      labelSets: entry.labelSets,
      maxAgents: entry.maxAgents,
      entry,
      valid: errors.length === 0,
    });
    return errors.length ? { valid: false, errors } : { valid: true };
  }

  applyReload(entry: ScalerEntry): void {
    this.applied.push(entry);
    this.entry = entry;
  }

  async shutdownAll(): Promise<void> {
    this.shutdownCalls += 1;
    if (this.capabilities.lifetime === 'cluster') return;
    await Promise.all([...this.agents.keys()].map((id) => this.destroy(id, { reason: 'shutdown' })));
  }
}

// ---------------------------------------------------------------------------------------------
// Harness

export interface FakeAgent {
  id: string;
  messages: OrchestratorMessage[];
  connected: boolean;
  conn: ConnectedAgent;
  registration: RegistrationResult | null;
  /** The shared agent session (absent in manager-only harnesses). */
  session?: AgentSession;
}

export interface HarnessOptions {
  /** A parsed config, or file input (parsed with the real schema). */
  config: ScalerConfig | ScalerConfigInput | Record<string, unknown>;
  /** Share a store (restart tests); a fresh PGlite copy otherwise (closed by `close()`). */
  store?: Store;
  clock?: ManualClock;
  instanceId?: string;
  spawnTimeoutMs?: number;
  agentTokenTtlMs?: number;
  backoff?: ProvisionBackoffOptions;
  ledger?: MachineLedger;
  /** Wire a real Dispatcher (default true). */
  dispatcher?: boolean;
  isDraining?: () => boolean;
  /** Tune each backend as it is built (also the ones a reload builds). */
  configureBackend?: (b: RecordingBackend) => void;
  /** A destroyed connected agent drops its socket, like a killed process (default true). */
  killOnDestroy?: boolean;
  /** The manager's logger (silent by default). */
  logger?: Logger;
}

export type RegisterOutcome =
  { ok: true; result: RegistrationResult | null; agent: FakeAgent } | { ok: false; reason: string };

export class ManagerHarness {
  readonly clock: ManualClock;
  readonly store: Store;
  readonly manager: ScalerManager;
  readonly dispatcher: Dispatcher | undefined;
  /** Backends by scaler name, including ones built by reloads (latest per name). */
  readonly backends = new Map<string, RecordingBackend>();
  readonly built: RecordingBackend[] = [];
  readonly agents = new Map<string, FakeAgent>();
  /** The session secret each agent id was given, presented again by its re-registrations. */
  readonly sessionSecrets = new Map<string, string>();
  readonly hooks = {
    capacityFreed: 0,
    jobEvents: [] as { jobId: string; type: ScalerEventType; detail: string }[],
    spawnFailed: [] as { jobId: string; error: ClassifiedSpawnError }[],
  };
  readonly factory: BackendFactory;
  readonly factoryCalls: string[] = [];
  /** Names the factory refuses to build. */
  readonly factoryRefuses = new Set<string>();
  private readonly ownsStore: (() => Promise<void>) | undefined;

  private constructor(
    readonly opts: HarnessOptions,
    store: Store,
    closeStore: (() => Promise<void>) | undefined,
  ) {
    this.clock = opts.clock ?? new ManualClock();
    this.store = store;
    this.ownsStore = closeStore;
    const config = isParsed(opts.config) ? opts.config : scalerConfig(opts.config);
    const backends = config.scalers.map((e) => this.buildBackend(e));
    this.factory = async (entry) => {
      this.factoryCalls.push(entry.name);
      if (this.factoryRefuses.has(entry.name)) throw new Error(`cannot build "${entry.name}"`);
      return this.buildBackend(entry);
    };
    this.manager = new ScalerManager({
      config,
      backends,
      store,
      clock: this.clock,
      logger: opts.logger ?? pino({ level: 'silent' }),
      instanceId: opts.instanceId ?? 'orch-test',
      orchestratorUrlFor: () => 'ws://127.0.0.1:1/ws',
      ...(opts.spawnTimeoutMs !== undefined ? { spawnTimeoutMs: opts.spawnTimeoutMs } : {}),
      ...(opts.agentTokenTtlMs !== undefined ? { agentTokenTtlMs: opts.agentTokenTtlMs } : {}),
      ...(opts.backoff ? { backoff: opts.backoff } : {}),
      ...(opts.ledger ? { ledger: opts.ledger } : {}),
      ...(opts.isDraining ? { isDraining: opts.isDraining } : {}),
    });
    if (opts.dispatcher !== false) {
      const dispatcher = new Dispatcher({
        store,
        clock: this.clock,
        logger: pino({ level: 'silent' }),
        scaler: this.manager,
      });
      this.dispatcher = dispatcher;
      // As src/server/orchestrator.ts wires them.
      this.manager.setHooks(
        {
          onCapacityFreed: () => {
            this.hooks.capacityFreed += 1;
            void dispatcher.requestPump();
          },
          onJobEvent: (jobId, type, detail) => this.hooks.jobEvents.push({ jobId, type, detail }),
          onSpawnFailed: (jobId, error) => {
            this.hooks.spawnFailed.push({ jobId, error });
            const q = dispatcher.queue.get(jobId);
            if (q) q.waiting = `${error.kind}: ${error.message}`;
            store.jobs.setProvisioningError(jobId, `${error.kind}: ${error.message}`).catch(() => {});
          },
        },
        dispatcher.registryView(),
      );
    } else {
      this.dispatcher = undefined;
      this.manager.setHooks({
        onCapacityFreed: () => {
          this.hooks.capacityFreed += 1;
        },
        onJobEvent: (jobId, type, detail) => this.hooks.jobEvents.push({ jobId, type, detail }),
        onSpawnFailed: (jobId, error) => this.hooks.spawnFailed.push({ jobId, error }),
      });
    }
  }

  /** What the server gives an agent session, wired to this harness (silent log, 10 s heartbeats). */
  sessionDeps(over: Partial<AgentSessionDeps> = {}): AgentSessionDeps {
    return {
      store: this.store,
      dispatcher: this.dispatcher!,
      clock: this.clock,
      logger: pino({ level: 'silent' }),
      heartbeatIntervalMs: 10_000,
      isStopping: () => false,
      ...over,
    };
  }

  static async create(opts: HarnessOptions): Promise<ManagerHarness> {
    if (opts.store) return new ManagerHarness(opts, opts.store, undefined);
    const fresh = await freshStore();
    return new ManagerHarness(opts, fresh.store, fresh.close);
  }

  private buildBackend(entry: ScalerEntry): RecordingBackend {
    const b = new RecordingBackend(entry);
    if (this.opts.killOnDestroy !== false) {
      b.onDestroyed = (id) => {
        if (this.agents.get(id)?.connected) queueMicrotask(() => void this.disconnect(id));
      };
    }
    this.opts.configureBackend?.(b);
    this.backends.set(entry.name, b);
    this.built.push(b);
    return b;
  }

  backend(name: string): RecordingBackend {
    const b = this.backends.get(name);
    if (!b) throw new Error(`no backend "${name}"`);
    return b;
  }

  get d(): Dispatcher {
    if (!this.dispatcher) throw new Error('this harness has no dispatcher');
    return this.dispatcher;
  }

  /** Every spawn request across every backend ever built, in call order per backend. */
  allSpawns(): SpawnRequest[] {
    return this.built.flatMap((b) => b.spawns);
  }

  backendOf(agentId: string): RecordingBackend | undefined {
    for (let i = this.built.length - 1; i >= 0; i--)
      if (this.built[i]!.requestFor(agentId) || this.built[i]!.agents.has(agentId)) return this.built[i];
    return undefined;
  }

  /** Submit a run through the dispatcher (validated like the API). */
  async submit(
    jobs: Record<string, Record<string, unknown>>,
  ): Promise<{ runId: string; ids: string[]; byName: Record<string, string> }> {
    const spec = runSpecSchema.parse({
      jobs: Object.fromEntries(Object.entries(jobs).map(([n, j]) => [n, { steps: [{ run: 'true' }], ...j }])),
    });
    const r = await this.d.submit(spec);
    await this.settle();
    return {
      runId: r.runId,
      ids: r.jobs.map((j) => j.id),
      byName: Object.fromEntries(r.jobs.map((j) => [j.name, j.id])),
    };
  }

  /**
   * Let every async chain run to a standstill: the store is one FIFO connection, so a sentinel
   * query completes only after every query issued before it.
   */
  async settle(): Promise<void> {
    let last = '';
    let stable = 0;
    for (let i = 0; i < 400 && stable < 3; i++) {
      await new Promise<void>((r) => setImmediate(r));
      await sql`select 1`.execute(this.store.db);
      const fp = this.fingerprint();
      if (fp === last) stable++;
      else {
        stable = 0;
        last = fp;
      }
    }
  }

  private fingerprint(): string {
    const m = this.manager;
    const parts: (string | number)[] = [
      m
        .entries()
        .map((e) => `${e.agentId}:${e.phase}:${e.spawnStartedAtMs ?? '-'}`)
        .join(','),
      m.capBook().count(),
      this.hooks.capacityFreed,
      this.hooks.spawnFailed.length,
    ];
    for (const b of this.built)
      parts.push(b.spawns.length, b.agents.size, b.destroys.length, b.inFlight, b.shutdownCalls);
    if (this.dispatcher) {
      parts.push(this.dispatcher.queue.size, this.dispatcher.active.size, this.dispatcher.registry.size);
      for (const a of this.dispatcher.active.values()) parts.push(`${a.job.id}:${a.state}`);
    }
    for (const a of this.agents.values()) parts.push(a.messages.length, a.connected ? 1 : 0);
    return parts.join('|');
  }

  /** Move the clock (firing due timers) and let the consequences run. */
  async advance(ms: number): Promise<void> {
    this.clock.advance(ms);
    await this.settle();
  }

  /** What the orchestrator's periodic sweep does. */
  async sweep(): Promise<void> {
    this.manager.sweepStale();
    await this.dispatcher?.requestPump();
    await this.settle();
  }

  async pump(): Promise<void> {
    await this.d.requestPump();
    await this.settle();
  }

  /**
   * A `register` message through the same AgentSession the WebSocket handler uses (token check and
   * scope, scaler.onAgentRegistered, registry.add, dispatchBound / requestPump). Without an explicit
   * token, a scaler agent uses the one its spawn got and any other agent gets a freshly minted one.
   */
  async registerAgent(
    agentId: string,
    opts: { labels?: string[]; token?: string } = {},
  ): Promise<RegisterOutcome> {
    const req = this.backendOf(agentId)?.requestFor(agentId);
    const labels = canonicalizeLabels(opts.labels ?? req?.fullLabels ?? []);
    if (!this.dispatcher)
      return this.registerWithoutDispatcher(
        agentId,
        labels,
        opts.token ?? (req ? spawnToken(req) : undefined),
      );
    const token =
      opts.token ??
      (req ? spawnToken(req) : undefined) ??
      (
        await this.store.tokens.mint({
          agentId,
          labels,
          kind: agentId.startsWith('scaler-') ? 'ephemeral' : 'static',
          now: new Date(this.clock.now()),
        })
      ).token;
    const fake = { id: agentId, messages: [], connected: true, registration: null } as unknown as FakeAgent;
    fake.session = new AgentSession(
      this.sessionDeps(),
      {
        send: (msg) => void fake.messages.push(msg),
        // A closed fake socket ends its session the way a real close event does.
        close: () => queueMicrotask(() => void this.disconnectFake(fake)),
        isOpen: () => fake.connected,
      },
      'harness',
    );
    // Each harness agent is one process: its reconnects prove the session its first registration got.
    const session = this.sessionSecrets.get(agentId);
    await fake.session.receive({
      type: 'register',
      protocol: 1,
      agentId,
      token,
      labels,
      ...(session ? { session } : {}),
    });
    const ack = fake.messages.find((m) => m.type === 'register.ack');
    if (ack?.type === 'register.ack' && ack.session) this.sessionSecrets.set(agentId, ack.session);
    if (!fake.session.agent) {
      fake.connected = false;
      await fake.session.closed();
      return { ok: false, reason: fake.session.refusal?.reason ?? 'registration failed' };
    }
    fake.conn = fake.session.agent;
    fake.registration = fake.session.registration;
    this.agents.set(agentId, fake);
    await this.settle();
    return { ok: true, result: fake.registration, agent: fake };
  }

  /** Manager-only harnesses (no dispatcher) check the token and call the scaler directly. */
  private async registerWithoutDispatcher(
    agentId: string,
    labels: string[],
    token: string | undefined,
  ): Promise<RegisterOutcome> {
    if (token !== undefined) {
      const check = await this.store.tokens.check(token, new Date(this.clock.now()));
      if (!check.ok) return { ok: false, reason: check.reason };
      if (check.agentId !== agentId)
        return { ok: false, reason: `token is not valid for agent id "${agentId}"` };
      const scope = new Set(check.labels);
      const outside = labels.filter(
        (l) => !scope.has(l) && !SELF_REPORTED_PREFIXES.some((p) => l.startsWith(p)),
      );
      if (outside.length)
        return { ok: false, reason: `labels outside the token's scope: ${outside.join(', ')}` };
    }
    let scaled: RegistrationResult | null;
    try {
      scaled = this.manager.onAgentRegistered(agentId);
    } catch (err) {
      if (err instanceof RegistrationRefused) return { ok: false, reason: err.message };
      throw err;
    }
    const fake: FakeAgent = {
      id: agentId,
      messages: [],
      connected: true,
      registration: scaled,
      conn: newConnectedAgent({
        id: agentId,
        labels,
        scaled,
        nowMs: this.clock.now(),
        send: (msg) => {
          if (fake.connected) fake.messages.push(msg);
        },
        close: () => queueMicrotask(() => void this.disconnectFake(fake)),
      }),
    };
    this.agents.set(agentId, fake);
    await this.settle();
    return { ok: true, result: scaled, agent: fake };
  }

  /** A static (operator) agent with these labels. */
  async registerStatic(agentId: string, labels: string[]): Promise<FakeAgent> {
    const r = await this.registerAgent(agentId, { labels });
    if (!r.ok) throw new Error(r.reason);
    return r.agent;
  }

  /** Job ids this agent was sent in job.assign messages. */
  assigned(agentId: string): string[] {
    return (this.agents.get(agentId)?.messages ?? []).flatMap((m) =>
      m.type === 'job.assign' ? [m.job.id] : [],
    );
  }

  async startJob(agentId: string, jobId: string): Promise<void> {
    await this.d.active.onJobStarted(agentId, jobId);
    await this.settle();
  }

  /** job.started then job.finished, as an agent reports them. */
  async finishJob(
    agentId: string,
    jobId: string,
    result: 'succeeded' | 'failed' = 'succeeded',
  ): Promise<void> {
    await this.d.active.onJobStarted(agentId, jobId);
    await this.d.active.onJobFinished(agentId, jobId, result, result === 'succeeded' ? 0 : 1);
    await this.settle();
  }

  /** The agent's socket closed. */
  async disconnect(agentId: string): Promise<void> {
    const fake = this.agents.get(agentId);
    if (fake) await this.disconnectFake(fake);
  }

  private async disconnectFake(fake: FakeAgent): Promise<void> {
    if (!fake.connected) return;
    fake.connected = false;
    if (fake.session) await fake.session.closed();
    else await this.manager.onAgentDisconnected(fake.id);
    await this.settle();
  }

  connectedIds(): string[] {
    return [...this.agents.values()].filter((a) => a.connected).map((a) => a.id);
  }

  async jobState(jobId: string): Promise<string | undefined> {
    await this.dispatcher?.writes.flush(); // what the dispatcher was told, not a group-commit tick behind
    return (await this.store.jobs.get(jobId))?.state;
  }

  async spawnRows(): Promise<{ agent_id: string; registered_at: Date | null; backend_ref: string | null }[]> {
    return this.store.db
      .selectFrom('scaler_spawning_agents')
      .select(['agent_id', 'registered_at', 'backend_ref'])
      .execute();
  }

  async reservationRows(): Promise<{ agent_id: string; cpu_units: number; mem_bytes: string | number }[]> {
    return this.store.db
      .selectFrom('scaler_reservations')
      .select(['agent_id', 'cpu_units', 'mem_bytes'])
      .execute();
  }

  async close(): Promise<void> {
    await this.dispatcher?.stop();
    this.manager.warm.stop();
    await this.settle();
    await this.ownsStore?.();
  }
}

function isParsed(c: HarnessOptions['config']): c is ScalerConfig {
  // A parsed config always carries the defaulted globalMaxAgents and per-entry defaults.
  const scalers = (c as { scalers?: unknown }).scalers;
  return (
    typeof (c as ScalerConfig).globalMaxAgents === 'number' &&
    Array.isArray(scalers) &&
    scalers.every(
      (s) =>
        typeof s === 'object' &&
        s !== null &&
        'maxConcurrentSpawns' in s &&
        'mandatoryLabels' in s &&
        'networkIsolation' in s,
    )
  );
}

/** Remove every row the scaler and the dispatcher wrote (a store shared across property runs). */
export async function wipeStore(store: Store): Promise<void> {
  await sql`delete from scaler_agent_jobs`.execute(store.db);
  await sql`delete from scaler_spawn_times`.execute(store.db);
  await sql`delete from scaler_reservations`.execute(store.db);
  await sql`delete from scaler_spawning_agents`.execute(store.db);
  await sql`delete from agent_tokens`.execute(store.db);
  await sql`delete from agents`.execute(store.db);
  await sql`delete from job_logs`.execute(store.db);
  await sql`delete from job_log_chunks`.execute(store.db);
  await sql`delete from step_results`.execute(store.db);
  await sql`delete from jobs`.execute(store.db);
  await sql`delete from runs`.execute(store.db);
}

/**
 * One PGlite store per test file (a fresh copy costs seconds), wiped before each test, plus a
 * `make` that builds harnesses on it and closes them after each test.
 */
export function useManagerHarnesses(): {
  make(opts: Omit<HarnessOptions, 'store'> & { store?: Store }): Promise<ManagerHarness>;
  store(): Store;
} {
  let fresh: Awaited<ReturnType<typeof freshStore>> | undefined;
  const made: ManagerHarness[] = [];
  beforeAll(async () => {
    fresh = await freshStore();
  }, 60_000);
  afterAll(async () => {
    await fresh?.close();
  });
  beforeEach(async () => {
    await wipeStore(fresh!.store);
  });
  afterEach(async () => {
    for (const h of made.splice(0)) await h.close();
  });
  return {
    store: () => fresh!.store,
    async make(opts) {
      const h = await ManagerHarness.create({ ...opts, store: opts.store ?? fresh!.store });
      made.push(h);
      return h;
    },
  };
}
