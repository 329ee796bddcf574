/**
 * Test harness for the ScalerManager: a builder that wires a real ScalerManager (manual clock, real
 * PGlite store) to a real Dispatcher the way `src/server/orchestrator.ts` does (harness-wiring.ts),
 * on RecordingBackends whose every spawn the test settles by hand (recording-backend.ts), with fake
 * connected agents that behave like `src/server/agent-socket.ts` (harness-agents.ts).
 */
import { sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import type { ScalerEntry } from '../../src/config/index.js';
import type { Dispatcher } from '../../src/dispatch/dispatcher.js';
import { runSpecSchema } from '../../src/jobs/run-spec.js';
import type { ScalerManager } from '../../src/scaler/manager.js';
import type { BackendFactory } from '../../src/scaler/reload.js';
import type { SpawnContext as SpawnRequest } from '../../src/scaler/types.js';
import type { AgentSessionDeps } from '../../src/server/agent-session.js';
import type { Store } from '../../src/store/index.js';
import { ManualClock } from '../../src/util/clock.js';
import { freshStore } from './data-dir.js';
import { disconnectFake, registerFakeAgent, type FakeAgent, type RegisterOutcome } from './harness-agents.js';
import { wireManager, type HarnessHooks, type HarnessOptions } from './harness-wiring.js';
import { RecordingBackend } from './recording-backend.js';
import { parsedScalerConfig } from './scaler-config.js';
import { wipeStore } from './store-per-file.js';

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
  readonly hooks: HarnessHooks = { capacityFreed: 0, jobEvents: [], spawnFailed: [] };
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
    const config = parsedScalerConfig(opts.config);
    const backends = config.scalers.map((e) => this.buildBackend(e));
    this.factory = async (entry) => {
      this.factoryCalls.push(entry.name);
      if (this.factoryRefuses.has(entry.name)) throw new Error(`cannot build "${entry.name}"`);
      return this.buildBackend(entry);
    };
    const wired = wireManager(opts, { config, backends, store, clock: this.clock, hooks: this.hooks });
    this.manager = wired.manager;
    this.dispatcher = wired.dispatcher;
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
   * A `register` message through the same AgentSession the WebSocket handler uses (see
   * registerFakeAgent); manager-only harnesses check the token and call the scaler directly.
   */
  registerAgent(agentId: string, opts: { labels?: string[]; token?: string } = {}): Promise<RegisterOutcome> {
    return registerFakeAgent(this, agentId, opts);
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
    if (fake) await disconnectFake(this, fake);
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
