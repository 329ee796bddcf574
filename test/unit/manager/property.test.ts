/**
 * The acceptance property: a real Dispatcher + ScalerManager (real PGlite store, manual clock,
 * recording backends, fake agents) driven through random interleavings of everything that can
 * happen to jobs, spawns, agents and the config. After every command:
 *   (a) no cap is ever exceeded: when a reservation is taken, the scaler's live agents stay within
 *       the maxAgents in force and all agents within globalMaxAgents; no compute outlives the
 *       manager's knowledge of it; spawn calls in flight stay within maxConcurrentSpawns;
 *   (b) no job is assigned twice, unless its agent left before starting it (a requeue);
 *   a job settles `no-backend` only when no label set of the config in force could serve it.
 *   (e) `scaler explain` agrees with the scaler: at every requestScale, explain (asked just before,
 *       on the same state) named the action the manager then took; at every reconcile plan, explain
 *       named the planner's action for each group; at rest, for every queued job, explain and the
 *       manager's own decision path give the same action.
 * After draining (finish all, disconnect all, advance past every backoff, pump):
 *   (c) every reservation is released, in memory and in the store;
 *   (d) no starvation: every job is final, and a job that a label set serves finished by running.
 *
 * Reproduce a failure with the printed seed and path:
 *   KICI_PROPERTY_SEED=<seed> KICI_PROPERTY_PATH=<path> vitest run --project unit test/unit/manager/property.test.ts
 * (set KICI_PROPERTY_SHRINK=1 to let fast-check shrink the counterexample; slower).
 */
import fc from 'fast-check';
import { describe, it } from 'vitest';
import { TERMINAL_JOB_STATES } from '../../../src/store/index.js';
import { findLabelSet, buildRoutingTable } from '../../../src/scaler/core/routing.js';
import { DeterministicSpawnError } from '../../../src/scaler/core/spawn-errors.js';
import type { Reservation } from '../../../src/scaler/core/caps.js';
import type { GroupDecision } from '../../../src/scaler/core/plan.js';
import type { ScaleJob, ScaleResult } from '../../../src/scaler/types.js';
import { explainJobWith } from '../../../src/server/scaler-views.js';
import type { JobRow } from '../../../src/store/index.js';
import { isWarmStock } from '../../../src/scaler/agent-book.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';
import { wipeStore } from '../../helpers/store-per-file.js';

const hs = useManagerHarnesses();

const SPAWN_TIMEOUT_MS = 60_000;
const WIDTH = { alpha: 2, beta: 1 } as const;

/** Job label choices: served ones, a removable one, and ones no label set serves. */
const LABELS: string[][] = [
  ['linux'],
  ['linux', 'small'],
  ['linux', 'big'],
  ['gpu'],
  ['windows'],
  ['linux', 'gpu'],
];
/**
 * excludeLabels a job may carry (KICI_PROPERTY_EXCLUDE=0 turns them off when narrowing a failure).
 */
const EXCLUDES: string[][] = [[], ['kici:scaler:alpha'], ['big']];
const WITH_EXCLUDES = process.env.KICI_PROPERTY_EXCLUDE !== '0';

interface Model {
  alphaMax: number;
  betaMax: number;
  globalMax: number;
  alphaBig: boolean;
  betaPresent: boolean;
  /** Warm-pool size of each alpha label set (0 = no pool). */
  warm: number;
}

type Cmd =
  | { t: 'submit'; jobs: { l: number; x: number }[] }
  | { t: 'resolve'; pick: number }
  | { t: 'boot'; pick: number }
  | { t: 'fail'; pick: number; deterministic: boolean }
  | { t: 'exit'; pick: number }
  | { t: 'hang' }
  | { t: 'register'; pick: number }
  | { t: 'start'; pick: number }
  | { t: 'finish'; pick: number; ok: boolean }
  | { t: 'disconnect'; pick: number }
  | { t: 'reload'; model: Model }
  | { t: 'advance'; ms: number }
  | { t: 'pump' }
  | { t: 'redrive' }
  | WarmTickCmd;

const pick = fc.nat({ max: 1_000 });
/** Mostly served labels; unserved ones less often. */
const labelChoice = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(0, 1) },
  { weight: 2, arbitrary: fc.constantFrom(2, 3) },
  { weight: 1, arbitrary: fc.constantFrom(4, 5) },
);
const modelArb: fc.Arbitrary<Model> = fc.record({
  alphaMax: fc.integer({ min: 1, max: 3 }),
  betaMax: fc.integer({ min: 1, max: 2 }),
  globalMax: fc.integer({ min: 1, max: 4 }),
  alphaBig: fc.boolean(),
  betaPresent: fc.boolean(),
  warm: fc.integer({ min: 0, max: 2 }),
});
/** Warm-pool ticks (the rest of that block is further down). */
const warmTickArb: fc.Arbitrary<WarmTickCmd> = fc.record({
  t: fc.constant('warmTick' as const),
  ticks: fc.integer({ min: 1, max: 3 }),
  awaited: fc.boolean(),
});

const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      t: fc.constant('submit' as const),
      jobs: fc.array(fc.record({ l: labelChoice, x: fc.nat({ max: EXCLUDES.length - 1 }) }), {
        minLength: 1,
        maxLength: 4,
      }),
    }),
  },
  { weight: 4, arbitrary: fc.record({ t: fc.constant('resolve' as const), pick }) },
  { weight: 4, arbitrary: fc.record({ t: fc.constant('boot' as const), pick }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('fail' as const), pick, deterministic: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('exit' as const), pick }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('hang' as const) }) },
  { weight: 5, arbitrary: fc.record({ t: fc.constant('register' as const), pick }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('start' as const), pick }) },
  { weight: 4, arbitrary: fc.record({ t: fc.constant('finish' as const), pick, ok: fc.boolean() }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant('disconnect' as const), pick }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('reload' as const), model: modelArb }) },
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant('advance' as const),
      ms: fc.constantFrom(25, 1_000, 10_000, 30_000, 120_000, 300_000),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('pump' as const) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('redrive' as const) }) },
  { weight: 3, arbitrary: warmTickArb },
);

// ---------------------------------------------------------------------------------------------
// Warm-pool ticks. Ticks run among the other commands, awaited or left running while the next
// commands go on (so ticks overlap each other and everything else). Every warm spawn is checked at
// the moment it is asked for: the pool it fills must be below its size in force.

type WarmTickCmd = { t: 'warmTick'; ticks: number; awaited: boolean };

function warmPoolOf(m: Model): Record<string, unknown> {
  return m.warm > 0 ? { warmPool: { enabled: true, size: m.warm, idleTimeoutSeconds: 60 } } : {};
}

async function runWarmTicks(run: Run, c: WarmTickCmd): Promise<void> {
  const ticks = Array.from({ length: c.ticks }, () => run.h.manager.warm.tick());
  if (c.awaited) await Promise.all(ticks);
  await run.h.settle();
}

/** Fail the run when a warm spawn is asked for although its pool already holds its size. */
function watchWarmSpawns(run: Run): void {
  const m = run.h.manager;
  const provision = m.provision.bind(m);
  m.provision = (match, res, job) => {
    if (!job) {
      const spec = m.warm
        .specs()
        .find((p) => p.scalerName === match.scalerName && p.labelSetKey === match.key);
      const stock = m
        .entries()
        .filter(
          (e) => isWarmStock(e) && e.scalerName === match.scalerName && e.labelSetKey === match.key,
        ).length;
      if (spec && stock >= spec.size)
        run.violations.push(
          `(w) warm spawn for ${spec.key} with ${stock} warm agents, pool size ${spec.size}`,
        );
    }
    return provision(match, res, job);
  };
}

/** Lifecycle: no move the table refuses ever happened. */
function lifecycleViolations(h: ManagerHarness): string[] {
  const n = h.manager.illegalTransitions;
  return n ? [`(l) ${n} illegal agent lifecycle transition(s)`] : [];
}
// --- end of warm-pool ticks ------------------------------------------------------------------

const INITIAL: Model = {
  alphaMax: 2,
  betaMax: 1,
  globalMax: 3,
  alphaBig: true,
  betaPresent: true,
  warm: 1,
};

function configOf(m: Model) {
  return scalerConfig({
    version: 1,
    globalMaxAgents: m.globalMax,
    // Warm pools keep only label sets of a known size warm (warmSkipReason).
    defaults: { resources: { requests: { cpus: 1 } } },
    scalers: [
      bareMetal(
        'alpha',
        m.alphaBig
          ? [
              ['linux', 'small'],
              ['linux', 'big'],
            ]
          : [['linux', 'small']],
        {
          maxAgents: m.alphaMax,
          maxConcurrentSpawns: WIDTH.alpha,
          ...warmPoolOf(m),
        },
      ),
      ...(m.betaPresent
        ? [bareMetal('beta', [['gpu']], { maxAgents: m.betaMax, maxConcurrentSpawns: WIDTH.beta })]
        : []),
    ],
  });
}

const maxOf = (m: Model, scaler: string) => (scaler === 'alpha' ? m.alphaMax : m.betaMax);

class Run {
  model: Model = INITIAL;
  readonly jobs = new Map<string, { runsOn: string[]; exclude: string[] }>();
  readonly requeues = new Map<string, number>();
  readonly seenNoBackend = new Set<string>();
  readonly violations: string[] = [];
  readonly trace: string[] = [];
  readonly stats = {
    reservations: 0,
    atCapAlpha: 0,
    atGlobalCap: 0,
    reloads: 0,
    succeeded: 0,
    failed: 0,
    noBackend: 0,
    requeues: 0,
    registered: 0,
    explainChecks: 0,
  };

  constructor(readonly h: ManagerHarness) {
    this.watchExplain();
    // Observe every real reservation at the moment it is taken (the planner works on a clone).
    const caps = h.manager.capBook();
    const reserve = caps.reserve.bind(caps);
    caps.reserve = (r: Reservation, live: { global: number; scaler: number }) => {
      const res = reserve(r, live);
      if (res.ok) {
        this.stats.reservations++;
        this.checkAtReservation(r);
      }
      return res;
    };
  }

  // ---- (e) explain vs the manager (one decision) -----------------------------------

  /** What `scaler explain` says for a queued job, from a row built off the dispatcher's queue. */
  private explainAction(jobId: string): string | undefined {
    const q = this.h.d.queue.get(jobId);
    if (!q) return undefined;
    const row = {
      id: q.id,
      run_id: q.runId,
      name: q.name,
      state: 'queued',
      runs_on: q.runsOn,
      spec: { runsOn: q.runsOn, steps: [{ run: 'true' }], ...q.spec },
      agent_id: null,
      reason: null,
      last_provisioning_error: null,
    } as unknown as JobRow;
    return explainJobWith(this.h.d, this.h.clock, row).action;
  }

  private disagree(jobId: string, said: string | undefined, did: string, where: string): void {
    this.stats.explainChecks++;
    if (said !== did)
      this.violations.push(`(e) ${where}: explain said ${said} for job ${jobId}, the scaler ${did}`);
  }

  /** Watch every requestScale and every reconcile plan, comparing each with explain. */
  private watchExplain(): void {
    const m = this.h.manager;
    const d = this.h.d;
    const requestScale = m.requestScale.bind(m);
    m.requestScale = (job: ScaleJob) => {
      // Asked synchronously, just before: the very state the manager decides on.
      const said = this.explainAction(job.id);
      const result = requestScale(job);
      if (said !== undefined)
        void result.then((r) => this.disagree(job.id, said, actionOf(r), 'requestScale'));
      return result;
    };
    const plan = d.plan.bind(d);
    d.plan = () => {
      const out = plan();
      // The planner fills a copy of the caps as it goes: once a group got spawns, later groups see
      // fewer free slots than explain does, so from there on only its spawn answers must match.
      let filled = false;
      for (const [n, dec] of out.plan.entries()) {
        const jobId = firstNeedingAgent(
          dec,
          [...out.groups[n]!.jobs()].map((j) => j.id),
          (id) => m.isProvisioning(id),
        );
        if (jobId === undefined || dec.action === undefined) continue;
        if (!filled || dec.action !== 'at-capacity')
          this.disagree(jobId, this.explainAction(jobId), dec.action, 'reconcile plan');
        if (dec.spawn.length) filled = true;
      }
      return out;
    };
  }

  /** At rest: explain and the manager's own decision path agree on every queued job. */
  private checkExplainAtRest(): void {
    for (const q of this.h.d.queue.all()) {
      this.disagree(
        q.id,
        this.explainAction(q.id),
        this.h.manager.decideNow(this.h.d.scaleJob(q)).action,
        'at rest',
      );
    }
  }

  // ---- end of (e) ----------------------------------------------------------------------------

  private checkAtReservation(r: Reservation): void {
    const owner = new Map<string, string>();
    for (const b of this.h.built) for (const id of b.agents.keys()) owner.set(id, b.name);
    for (const x of this.h.manager.capBook().all()) owner.set(x.agentId, x.scalerName);
    const mine = [...owner.values()].filter((s) => s === r.scalerName).length;
    if (mine === maxOf(this.model, r.scalerName)) this.stats.atCapAlpha++;
    if (owner.size === this.model.globalMax) this.stats.atGlobalCap++;
    if (mine > maxOf(this.model, r.scalerName)) {
      this.violations.push(
        `(a) reserving ${r.agentId}: scaler ${r.scalerName} holds ${mine} agents > maxAgents ${maxOf(this.model, r.scalerName)}`,
      );
    }
    if (owner.size > this.model.globalMax) {
      this.violations.push(
        `(a) reserving ${r.agentId}: ${owner.size} agents > globalMaxAgents ${this.model.globalMax}`,
      );
    }
  }

  private pendingSpawns(): { b: ManagerHarness['built'][number]; id: string }[] {
    return this.h.built.flatMap((b) => b.pendingIds().map((id) => ({ b, id })));
  }

  private started(): { b: ManagerHarness['built'][number]; id: string }[] {
    return this.h.built.flatMap((b) => b.startedIds().map((id) => ({ b, id })));
  }

  async exec(c: Cmd): Promise<void> {
    const h = this.h;
    const d = h.d;
    const at = <T>(xs: T[], n: number): T | undefined => (xs.length ? xs[n % xs.length] : undefined);
    switch (c.t) {
      case 'submit': {
        const spec = c.jobs.map(({ l, x }) => ({
          runsOn: LABELS[l]!,
          exclude: WITH_EXCLUDES ? EXCLUDES[x]! : [],
        }));
        const r = await h.submit(
          Object.fromEntries(
            spec.map((j, i) => [
              `j${i}`,
              { runsOn: j.runsOn, ...(j.exclude.length ? { excludeLabels: j.exclude } : {}) },
            ]),
          ),
        );
        spec.forEach((j, i) => this.jobs.set(r.byName[`j${i}`]!, j));
        return;
      }
      case 'resolve': {
        const p = at(this.pendingSpawns(), c.pick);
        if (p) p.b.resolveSpawn(p.id);
        break;
      }
      case 'boot': {
        // A spawn succeeds and its agent registers right away: the common path, to reach deeper states.
        const p = at(this.pendingSpawns(), c.pick);
        if (!p) return;
        p.b.resolveSpawn(p.id);
        await h.settle();
        if ((await h.registerAgent(p.id)).ok) this.stats.registered++;
        return;
      }
      case 'fail': {
        const p = at(this.pendingSpawns(), c.pick);
        if (!p) return;
        p.b.failSpawn(
          p.id,
          c.deterministic
            ? new DeterministicSpawnError('binary-missing', 'agent binary missing')
            : Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }),
        );
        break;
      }
      case 'exit': {
        const p = at(this.started(), c.pick);
        if (p) p.b.emitFailed(p.id, 'agent process exited with code 1 before it registered');
        break;
      }
      case 'hang':
        await h.advance(SPAWN_TIMEOUT_MS + 1);
        return;
      case 'register': {
        const p = at(this.started(), c.pick);
        if (p && (await h.registerAgent(p.id)).ok) this.stats.registered++;
        return;
      }
      case 'start': {
        const a = at(
          [...d.active.values()].filter((x) => x.state === 'dispatched'),
          c.pick,
        );
        if (a) await h.startJob(a.agentId, a.job.id);
        return;
      }
      case 'finish': {
        const a = at([...d.active.values()], c.pick);
        if (a) await h.finishJob(a.agentId, a.job.id, c.ok ? 'succeeded' : 'failed');
        return;
      }
      case 'disconnect': {
        const id = at(h.connectedIds(), c.pick);
        if (!id) return;
        for (const a of d.active.values()) {
          if (a.agentId === id && a.state === 'dispatched')
            this.requeues.set(a.job.id, (this.requeues.get(a.job.id) ?? 0) + 1);
        }
        await h.disconnect(id);
        return;
      }
      case 'reload': {
        const out = await h.manager.reload(configOf(c.model), h.factory);
        if (out.result === 'applied') {
          this.model = c.model;
          this.stats.reloads++;
        } else this.violations.push(`reload of a valid config was rejected: ${out.problems.join('; ')}`);
        break;
      }
      case 'advance':
        h.clock.advance(c.ms);
        await h.settle();
        if (c.ms >= 10_000) await h.sweep();
        return;
      case 'pump':
        await h.pump();
        return;
      case 'warmTick':
        await runWarmTicks(this, c);
        return;
      case 'redrive':
        // The pending-scale re-drive: ask the scaler for the oldest waiting jobs directly, so the
        // manager's own cap checks are exercised (not only the dispatcher's planner).
        for (const j of d.queue.all().slice(0, 10)) await h.manager.requestScale(d.scaleJob(j));
        break;
    }
    await h.settle();
  }

  /** Invariants that must hold whenever the system is at rest. */
  async check(): Promise<void> {
    this.checkExplainAtRest();
    const h = this.h;
    const m = h.manager;
    const entries = new Set(m.entries().map((e) => e.agentId));
    const reserved = new Set(
      m
        .capBook()
        .all()
        .map((r) => r.agentId),
    );
    for (const id of reserved)
      if (!entries.has(id)) this.violations.push(`(c) reservation ${id} without an agent entry`);
    for (const id of entries)
      if (!reserved.has(id)) this.violations.push(`(a) agent ${id} without a reservation`);
    for (const b of h.built) {
      for (const id of b.agents.keys())
        if (!entries.has(id))
          this.violations.push(`(a) backend ${b.name} holds compute ${id} the manager forgot`);
      const width = WIDTH[b.name as keyof typeof WIDTH];
      if (b.inFlight > width)
        this.violations.push(
          `(a) ${b.name}: ${b.inFlight} spawn calls in flight > maxConcurrentSpawns ${width}`,
        );
    }
    this.violations.push(...lifecycleViolations(h));
    for (const a of h.d.registry.list()) {
      if (a.kind === 'scaler' && !entries.has(a.id))
        this.violations.push(`(a) connected scaler agent ${a.id} unknown to the manager`);
    }
    // (b) assignments.
    const assigns = new Map<string, number>();
    for (const fake of h.agents.values()) {
      const mine = fake.messages.flatMap((x) => (x.type === 'job.assign' ? [x.job.id] : []));
      if (fake.conn.kind === 'scaler' && mine.length > 1)
        this.violations.push(`(b) single-use agent ${fake.id} was assigned ${mine.length} jobs`);
      for (const j of mine) {
        assigns.set(j, (assigns.get(j) ?? 0) + 1);
        const spec = this.jobs.get(j) ?? { runsOn: [], exclude: [] };
        if (!spec.runsOn.every((l) => fake.conn.labels.has(l)))
          this.violations.push(`(b) job ${j} [${spec.runsOn}] assigned to ${fake.id} lacking its labels`);
        if (spec.exclude.some((l) => fake.conn.labels.has(l)))
          this.violations.push(
            `(b) job ${j} excluding [${spec.exclude}] assigned to ${fake.id} carrying one`,
          );
      }
    }
    for (const [j, n] of assigns) {
      const allowed = 1 + (this.requeues.get(j) ?? 0);
      if (n > allowed) this.violations.push(`(b) job ${j} assigned ${n} times, allowed ${allowed}`);
    }
    // no-backend only when nothing in the config in force serves the job.
    const table = buildRoutingTable(configOf(this.model));
    const nb = await h.store.db
      .selectFrom('jobs')
      .select(['id', 'runs_on'])
      .where('state', '=', 'no-backend')
      .execute();
    for (const row of nb) {
      if (this.seenNoBackend.has(row.id)) continue;
      this.seenNoBackend.add(row.id);
      const hit = findLabelSet({ labels: row.runs_on, exclude: this.jobs.get(row.id)?.exclude ?? [] }, table);
      if (hit)
        this.violations.push(
          `(d) job ${row.id} [${row.runs_on}] settled no-backend although ${hit.scalerName}[${hit.key}] serves it`,
        );
    }
  }

  /** Finish everything, let everything leave, move past every backoff, until nothing is left. */
  async drain(): Promise<void> {
    const h = this.h;
    for (let round = 0; round < 60; round++) {
      for (let p = this.pendingSpawns(); p.length; p = this.pendingSpawns()) {
        for (const s of p) s.b.resolveSpawn(s.id);
        await h.settle();
      }
      for (const s of this.started()) if (h.manager.isManaged(s.id)) await h.registerAgent(s.id);
      for (const a of [...h.d.active.values()]) await h.finishJob(a.agentId, a.job.id, 'succeeded');
      for (const id of h.connectedIds()) await h.disconnect(id);
      // A disconnect re-drives the queue, which may retire a warm agent whose own disconnect is
      // still under way (the loop above then skipped it): let that finish before checking.
      await h.settle();
      await this.check();
      const idle = this.pendingSpawns().length === 0 && h.manager.entries().length === 0;
      if (idle && h.d.queue.size === 0 && h.d.active.size === 0) return;
      if (idle) await h.advance(901_000);
      else await h.advance(25);
      await h.sweep();
    }
  }

  async final(): Promise<void> {
    const h = this.h;
    const m = h.manager;
    if (m.capBook().count() !== 0)
      this.violations.push(`(c) ${m.capBook().count()} reservations left after the drain`);
    if (m.entries().length !== 0)
      this.violations.push(
        `(c) agents left after the drain: ${m.entries().map((e) => `${e.agentId}(${e.phase})`)}`,
      );
    if (m.capBook().usage().cpus !== 0 || m.capBook().usage().memBytes !== 0)
      this.violations.push('(c) global usage not back to zero');
    for (const b of h.built)
      if (b.agents.size) this.violations.push(`(c) backend ${b.name} still holds ${[...b.agents.keys()]}`);
    const spawnRows = await h.spawnRows();
    const resRows = await h.reservationRows();
    if (spawnRows.length) this.violations.push(`(c) spawn rows left: ${spawnRows.map((r) => r.agent_id)}`);
    if (resRows.length) this.violations.push(`(c) reservation rows left: ${resRows.map((r) => r.agent_id)}`);
    const live = await h.store.db
      .selectFrom('agent_tokens')
      .select('agent_id')
      .where('kind', '=', 'ephemeral')
      .where('revoked_at', 'is', null)
      .execute();
    if (live.length)
      this.violations.push(`(c) ephemeral tokens of gone agents still valid: ${live.map((r) => r.agent_id)}`);
    // (d) no starvation.
    const table = buildRoutingTable(configOf(this.model));
    const rows = await h.store.db.selectFrom('jobs').select(['id', 'state', 'runs_on', 'reason']).execute();
    for (const row of rows) {
      if (row.state === 'succeeded') this.stats.succeeded++;
      if (row.state === 'failed') this.stats.failed++;
      if (row.state === 'no-backend') this.stats.noBackend++;
      if (!TERMINAL_JOB_STATES.includes(row.state)) {
        const q = h.d.queue.get(row.id);
        this.violations.push(
          `(d) job ${row.id} [${row.runs_on}] still ${row.state} after the drain${q?.waiting ? ` (waiting: ${q.waiting})` : ''}`,
        );
      } else if (
        row.state === 'no-backend' &&
        findLabelSet({ labels: row.runs_on, exclude: this.jobs.get(row.id)?.exclude ?? [] }, table) &&
        !this.seenNoBackend.has(row.id)
      ) {
        this.violations.push(
          `(d) job ${row.id} settled no-backend in the drain although the final config serves it`,
        );
      }
    }
  }
}

/** A requestScale result as a decision action. */
function actionOf(r: ScaleResult): string {
  if (r.action === 'spawning') return 'spawn';
  if (r.action === 'skipped') return r.retryAfterMs !== undefined ? 'backoff' : 'skip';
  return r.action;
}

/** The group's first job the planner decided an agent for (not in flight, not given an idle agent). */
function firstNeedingAgent(
  dec: GroupDecision,
  jobIds: string[],
  inFlight: (id: string) => boolean,
): string | undefined {
  const assigned = new Set(dec.assign.map((a) => a.jobId));
  return dec.spawn[0]?.jobId ?? jobIds.find((id) => !assigned.has(id) && !inFlight(id));
}

const envInt = (name: string): number | undefined =>
  process.env[name] ? Number(process.env[name]) : undefined;

describe('scaler + dispatcher under random interleavings', () => {
  it('never exceeds a cap, never double-assigns, releases everything and starves nothing', async () => {
    let runNo = 0;
    const seed = envInt('KICI_PROPERTY_SEED');
    const path = process.env.KICI_PROPERTY_PATH;
    await fc.assert(
      fc.asyncProperty(fc.array(cmdArb, { minLength: 25, maxLength: 45 }), async (cmds) => {
        await wipeStore(hs.store());
        const h = await hs.make({
          instanceId: `prop-${++runNo}`,
          spawnTimeoutMs: SPAWN_TIMEOUT_MS,
          config: configOf(INITIAL),
        });
        const run = new Run(h);
        watchWarmSpawns(run);
        try {
          for (const [i, c] of cmds.entries()) {
            run.trace.push(`${i}: ${JSON.stringify(c)}`);
            await run.exec(c);
            await run.check();
            if (run.violations.length) break;
          }
          if (!run.violations.length) {
            await run.drain();
            await run.final();
          }
        } finally {
          await h.close();
        }
        run.stats.requeues = [...run.requeues.values()].reduce((a, b) => a + b, 0);
        if (process.env.KICI_PROPERTY_STATS) console.log(JSON.stringify(run.stats));
        if (run.violations.length) {
          throw new Error(
            `${run.violations.slice(0, 8).join('\n')}\n--- commands run:\n${run.trace.join('\n')}`,
          );
        }
      }),
      {
        numRuns: envInt('KICI_PROPERTY_RUNS') ?? 40,
        endOnFailure: process.env.KICI_PROPERTY_SHRINK !== '1',
        ...(seed !== undefined ? { seed } : {}),
        ...(path ? { path } : {}),
      },
    );
  }, 300_000);
});
