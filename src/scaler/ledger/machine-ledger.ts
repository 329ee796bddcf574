import { systemClock, type Clock, type TimerHandle } from '../../util/clock.js';
import { errorMessage } from '../../util/errors.js';
import { silentLogger, type Logger } from '../../util/logger.js';
import { withFileLock, type FileLockOptions } from './file-lock.js';
import {
  describeCap,
  LedgerError,
  poolFileName,
  poolFilePath,
  readLedgerFile,
  sameCap,
  validateCap,
  writeLedgerFile,
  type LedgerFileData,
  type LedgerReservation,
  type PoolCap,
} from './ledger-file.js';
import { isProcessAlive, isRowDead, readBootId, type RowOwnerContext } from './liveness.js';
import { poolFit } from './pool-fit.js';

/**
 * Machine-pool ledger: orchestrator processes on one host share a resource budget through one JSON
 * file per pool, each read-modify-write done under a `mkdir` file lock.
 */

export interface MachineLedgerOptions {
  dir: string;
  /** Stable id of this orchestrator; rows are owned per instance. */
  instanceId: string;
  clock?: Clock;
  logger?: Logger;
  isAlive?: (pid: number) => boolean;
  bootId?: string;
  /**
   * Also drop same-boot rows of OTHER instances whose pid no longer exists (default true). A
   * stricter rule keeps them because a pid from another PID namespace cannot be probed; our
   * orchestrators share one namespace, and keeping them would leak capacity until the next reboot
   * whenever a peer is killed. Turn off if instances run in separate PID namespaces (containers).
   */
  probeOtherInstances?: boolean;
  lock?: FileLockOptions;
}

export type ReserveResult = { ok: true } | { ok: false; reason: string };

export interface PoolUsage {
  cap: PoolCap;
  usedCpu: number;
  usedMemoryBytes: number;
  reservations: LedgerReservation[];
}

export class MachineLedger {
  readonly dir: string;
  readonly instanceId: string;
  readonly bootId: string;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly rowCtx: RowOwnerContext;
  private readonly lockOpts: FileLockOptions;
  private readonly pools = new Map<string, PoolCap>();
  /** Per-pool promise chain: calls from this process queue here instead of spinning on the lock. */
  private readonly chains = new Map<string, Promise<unknown>>();
  private timer: TimerHandle | undefined;
  /** Bumped by start/stop so a pass finishing after a restart cannot schedule a second loop. */
  private generation = 0;
  private running = false;
  private pass: Promise<unknown> | undefined;

  constructor(opts: MachineLedgerOptions) {
    if (!opts.instanceId) throw new LedgerError('invalid', 'machine ledger needs a non-empty instance id');
    this.dir = opts.dir;
    this.instanceId = opts.instanceId;
    this.clock = opts.clock ?? systemClock;
    this.log = (opts.logger ?? silentLogger()).child({ component: 'machine-ledger' });
    this.bootId = opts.bootId ?? readBootId();
    this.rowCtx = {
      bootId: this.bootId,
      instanceId: this.instanceId,
      isAlive: opts.isAlive ?? isProcessAlive,
      probeOtherInstances: opts.probeOtherInstances ?? true,
    };
    this.lockOpts = { logger: this.log, ...opts.lock };
  }

  /** Declare a pool and its cap. Re-registering with a different cap is refused: use `updateCap`. */
  registerPool(name: string, cap: PoolCap): void {
    const normalized = validateCap(name, cap);
    const known = this.pools.get(name);
    if (known && !sameCap(known, normalized)) {
      throw new LedgerError(
        'cap-mismatch',
        `machine pool "${name}" is already registered with cap ${describeCap(known)}; use updateCap to change it`,
      );
    }
    this.pools.set(name, normalized);
  }

  /**
   * Change a pool's cap (config reload): rewrite it in the file under the lock. Rows above a
   * lowered cap stay (their agents are running); new reservations are refused until usage drops.
   * Peers still on the old config get cap-mismatch errors until they reload too, which is the
   * point: two configs must not both be enforced on one pool.
   */
  async updateCap(name: string, cap: PoolCap): Promise<void> {
    const normalized = validateCap(name, cap);
    this.pools.set(name, normalized);
    await this.mutate(name, (file) => {
      const changed = !sameCap(file.cap, normalized);
      file.cap = normalized;
      if (changed) this.log.info({ pool: name, cap: normalized }, 'scaler.ledger pool cap updated');
      return { result: undefined, changed };
    });
  }

  async tryReserve(pool: string, agentId: string, cpus: number, memBytes: number): Promise<ReserveResult> {
    if (!agentId) throw new LedgerError('invalid', 'ledger reservation needs an agent id');
    if (!(cpus >= 0 && memBytes >= 0 && Number.isFinite(cpus + memBytes))) {
      throw new LedgerError(
        'invalid',
        `ledger request must be finite and >= 0, got cpus=${cpus} mem=${memBytes}`,
      );
    }
    const cap = this.capOf(pool);
    return this.mutate<ReserveResult>(pool, (file, path) => {
      if (!sameCap(file.cap, cap)) {
        throw new LedgerError(
          'cap-mismatch',
          `machine pool "${pool}": ${path} has cap ${describeCap(file.cap)} but this orchestrator ` +
            `is configured with ${describeCap(cap)}; every orchestrator on the host must declare the same cap`,
        );
      }
      const dropped = this.dropDead(pool, file);
      const changed = dropped > 0;
      if (file.reservations.some((r) => r.instanceId === this.instanceId && r.agentId === agentId)) {
        return { result: { ok: true }, changed }; // already reserved by us: idempotent
      }
      const load = {
        cap,
        usedCpu: sum(file.reservations, 'cpus'),
        usedMemoryBytes: sum(file.reservations, 'memBytes'),
      };
      const fit = poolFit(pool, load, cpus, memBytes);
      if (!fit.ok) return { result: fit, changed };
      file.reservations.push({
        instanceId: this.instanceId,
        pid: process.pid,
        bootId: this.bootId,
        agentId,
        cpus,
        memBytes,
        reservedAt: this.clock.now(),
      });
      return { result: { ok: true }, changed: true };
    });
  }

  /** Remove this instance's row for `agentId`. Idempotent; true when a row was removed. */
  async release(pool: string, agentId: string): Promise<boolean> {
    return this.mutate(pool, (file) => {
      const before = file.reservations.length;
      file.reservations = file.reservations.filter(
        (r) => !(r.instanceId === this.instanceId && r.agentId === agentId),
      );
      const removed = file.reservations.length < before;
      return { result: removed, changed: removed };
    });
  }

  /** Drop dead rows from every registered pool. Returns how many were removed. */
  async reapDead(): Promise<number> {
    let total = 0;
    for (const pool of this.pools.keys()) {
      try {
        total += await this.mutate(pool, (file) => {
          const n = this.dropDead(pool, file);
          return { result: n, changed: n > 0 };
        });
      } catch (err) {
        this.log.warn({ pool, err: errorMessage(err) }, 'scaler.ledger reap failed');
      }
    }
    return total;
  }

  /** Graceful shutdown: give back every row this instance holds in the registered pools. */
  async releaseAllForInstance(): Promise<number> {
    let total = 0;
    for (const pool of this.pools.keys()) {
      total += await this.mutate(pool, (file) => {
        const before = file.reservations.length;
        file.reservations = file.reservations.filter((r) => r.instanceId !== this.instanceId);
        const n = before - file.reservations.length;
        return { result: n, changed: n > 0 };
      });
    }
    return total;
  }

  /** Live usage as seen now (dead rows are left out but not removed). Read without the lock. */
  async usage(pool: string): Promise<PoolUsage> {
    const cap = this.capOf(pool);
    const file = await readLedgerFile(poolFilePath(this.dir, pool));
    const live = (file?.reservations ?? []).filter((r) => !isRowDead(r, this.rowCtx));
    return {
      cap: file?.cap ?? cap,
      usedCpu: sum(live, 'cpus'),
      usedMemoryBytes: sum(live, 'memBytes'),
      reservations: live,
    };
  }

  /** Start the periodic reaper: one pass now, then every `intervalMs`. */
  start(intervalMs = 30_000): void {
    if (this.running) return;
    this.running = true;
    const gen = ++this.generation;
    const tick = (): void => {
      this.pass = this.reapDead()
        .catch((err: unknown) => this.log.warn({ err: errorMessage(err) }, 'scaler.ledger reaper failed'))
        .finally(() => {
          if (this.running && this.generation === gen) this.timer = this.clock.setTimer(intervalMs, tick);
        });
    };
    tick();
  }

  /** Stop the reaper and wait for a pass in progress. */
  async stop(): Promise<void> {
    this.running = false;
    this.generation += 1;
    this.timer?.cancel();
    this.timer = undefined;
    await this.pass;
  }

  private capOf(pool: string): PoolCap {
    const cap = this.pools.get(pool);
    if (!cap) throw new LedgerError('unregistered-pool', `machine pool "${pool}" is not registered`);
    return cap;
  }

  /**
   * Read-modify-write one pool file under both the in-process chain and the file lock. A missing
   * file starts from the registered cap (or no cap for a pool only released from).
   */
  private mutate<T>(
    pool: string,
    fn: (file: LedgerFileData, path: string) => { result: T; changed: boolean },
  ): Promise<T> {
    const path = poolFilePath(this.dir, pool);
    const run = (): Promise<T> =>
      withFileLock(
        this.dir,
        poolFileName(pool),
        async () => {
          const existing = await readLedgerFile(path);
          const file = existing ?? { cap: { ...(this.pools.get(pool) ?? {}) }, reservations: [] };
          const { result, changed } = fn(file, path);
          if (changed) await writeLedgerFile(path, file);
          return result;
        },
        this.lockOpts,
      );
    const prev = this.chains.get(pool) ?? Promise.resolve();
    const next = prev.then(run, run);
    // The chain only orders the next call after this one; the error itself reaches the caller
    // through `next`, so the chain must not carry it on.
    const tail = next.catch(() => undefined);
    this.chains.set(pool, tail);
    void tail.then(() => {
      if (this.chains.get(pool) === tail) this.chains.delete(pool);
    });
    return next;
  }

  /** Remove dead rows in place; returns how many. */
  private dropDead(pool: string, file: LedgerFileData): number {
    const dead = file.reservations.filter((r) => isRowDead(r, this.rowCtx));
    if (dead.length === 0) return 0;
    file.reservations = file.reservations.filter((r) => !dead.includes(r));
    this.log.info(
      { pool, rows: dead.map((r) => ({ instanceId: r.instanceId, pid: r.pid, agentId: r.agentId })) },
      'scaler.ledger dropped reservations of dead processes',
    );
    return dead.length;
  }
}

const sum = (rows: LedgerReservation[], f: 'cpus' | 'memBytes'): number => rows.reduce((a, r) => a + r[f], 0);
