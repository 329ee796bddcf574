/**
 * A ScalerBackend that records everything and lets the test decide how each spawn ends: resolve
 * it, fail it, let it hang until the manager's deadline aborts it, or resolve it and then report
 * the agent process as exited before registering (`emitFailed`).
 */
import {
  normalizeLabelSet,
  type LabelSetConfig,
  type ScalerEntry,
  type ScalerType,
} from '../../src/config/index.js';
import { checkLabelSets } from '../../src/scaler/core/label-set-check.js';
import { SpawnError } from '../../src/scaler/core/spawn-errors.js';
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
import { FakeHost } from './host-compute.js';

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
  /**
   * A provisional launch asks for its record as soon as its start is asked for, as bare metal's does
   * (SpawnContext.record); the record's write, and whether it failed, is then the manager's.
   */
  recordOnSpawn = false;
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
    if (this.recordOnSpawn) void req.record?.().catch(() => undefined);
    return new Promise<ManagedAgent>((resolve, reject) => {
      /** The first settlement wins; it leaves the in-flight count and the pending map. */
      const first = (): boolean => {
        if (p.settled) return false;
        p.settled = true;
        this.inFlight -= 1;
        this.pending.delete(req.agentId);
        return true;
      };
      const p: Pending = {
        req,
        settled: false,
        resolve: (a) => void (first() && resolve(a)),
        reject: (err) => void (first() && reject(err)),
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
