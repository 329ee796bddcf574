import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LedgerError, poolFilePath } from '../../../src/scaler/ledger/ledger-file.js';
import { isRowDead } from '../../../src/scaler/ledger/liveness.js';
import { MachineLedger, type MachineLedgerOptions } from '../../../src/scaler/ledger/machine-ledger.js';
import { ManualClock } from '../../../src/util/clock.js';

const GiB = 1024 ** 3;
const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('MachineLedger', () => {
  let dir: string;
  const made: MachineLedger[] = [];
  const ledger = (instanceId: string, extra: Partial<MachineLedgerOptions> = {}): MachineLedger => {
    const l = new MachineLedger({ dir, instanceId, bootId: 'boot-1', ...extra });
    made.push(l);
    return l;
  };
  const rawFile = async (pool: string): Promise<{ version: number; cap: unknown; reservations: unknown[] }> =>
    JSON.parse(await readFile(poolFilePath(dir, pool), 'utf8'));

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kici-ledger-'));
  });
  afterEach(async () => {
    await Promise.all(made.splice(0).map((l) => l.stop()));
    await rm(dir, { recursive: true, force: true });
  });

  it('reads a missing file as empty and writes the documented format', async () => {
    const a = ledger('orch-a');
    a.registerPool('host', { maxCpu: 8, maxMemoryBytes: 16 * GiB });
    expect(await a.usage('host')).toMatchObject({ usedCpu: 0, usedMemoryBytes: 0, reservations: [] });
    expect(await a.tryReserve('host', 'agent-1', 2, 4 * GiB)).toEqual({ ok: true });
    const file = await rawFile('host');
    expect(file).toEqual({
      version: 1,
      cap: { maxCpu: 8, maxMemoryBytes: 16 * GiB },
      reservations: [
        {
          instanceId: 'orch-a',
          pid: process.pid,
          bootId: 'boot-1',
          agentId: 'agent-1',
          cpus: 2,
          memBytes: 4 * GiB,
          reservedAt: expect.any(Number),
        },
      ],
    });
  });

  it('refuses past the cap on either dimension; an absent dimension is unlimited', async () => {
    const a = ledger('orch-a');
    a.registerPool('cpu-only', { maxCpu: 4 });
    expect(await a.tryReserve('cpu-only', 'x', 4, 1_000 * GiB)).toEqual({ ok: true });
    const refused = await a.tryReserve('cpu-only', 'y', 0.5, 0);
    expect(refused).toEqual({
      ok: false,
      reason: 'machine pool "cpu-only" cpu cap exceeded: used 4 + requested 0.5 > cap 4',
    });
    a.registerPool('mem', { maxMemoryBytes: 2 * GiB });
    expect((await a.tryReserve('mem', 'x', 64, 2 * GiB)).ok).toBe(true);
    expect((await a.tryReserve('mem', 'y', 0, 1)).ok).toBe(false);
  });

  it('lets fractional cpus fill the cap exactly', async () => {
    const a = ledger('orch-a');
    a.registerPool('p', { maxCpu: 0.3 });
    expect((await a.tryReserve('p', 'a', 0.1, 0)).ok).toBe(true);
    expect((await a.tryReserve('p', 'b', 0.2, 0)).ok).toBe(true);
    expect((await a.tryReserve('p', 'c', 0.01, 0)).ok).toBe(false);
  });

  it('two instances racing on one dir never jointly exceed the cap', async () => {
    const a = ledger('orch-a');
    const b = ledger('orch-b');
    for (const l of [a, b]) l.registerPool('p', { maxCpu: 10, maxMemoryBytes: 10 * GiB });
    const attempts = Array.from({ length: 12 }, (_, i) => [
      a.tryReserve('p', `a-${i}`, 1, GiB),
      b.tryReserve('p', `b-${i}`, 1, GiB),
    ]).flat();
    const results = await Promise.all(attempts);
    expect(results.filter((r) => r.ok)).toHaveLength(10);
    const usage = await a.usage('p');
    expect(usage.usedCpu).toBe(10);
    expect(usage.usedMemoryBytes).toBe(10 * GiB);
    expect(usage.reservations).toHaveLength(10);
  });

  it('release removes only this instance’s row and is idempotent', async () => {
    const a = ledger('orch-a');
    const b = ledger('orch-b');
    for (const l of [a, b]) l.registerPool('p', { maxCpu: 4 });
    await a.tryReserve('p', 'same-id', 1, 0);
    await b.tryReserve('p', 'same-id', 1, 0);
    expect(await a.release('p', 'same-id')).toBe(true);
    expect(await a.release('p', 'same-id')).toBe(false);
    expect(await a.release('p', 'never-reserved')).toBe(false);
    expect((await a.usage('p')).reservations.map((r) => r.instanceId)).toEqual(['orch-b']);
  });

  it('a repeated reservation of the same agent is not counted twice', async () => {
    const a = ledger('orch-a');
    a.registerPool('p', { maxCpu: 2 });
    expect((await a.tryReserve('p', 'x', 2, 0)).ok).toBe(true);
    expect((await a.tryReserve('p', 'x', 2, 0)).ok).toBe(true);
    expect((await a.usage('p')).usedCpu).toBe(2);
  });

  it('releaseAllForInstance gives back every row of this instance in every pool', async () => {
    const a = ledger('orch-a');
    const b = ledger('orch-b');
    for (const l of [a, b]) {
      l.registerPool('p1', { maxCpu: 8 });
      l.registerPool('p2', { maxCpu: 8 });
    }
    await a.tryReserve('p1', 'a1', 1, 0);
    await a.tryReserve('p1', 'a2', 1, 0);
    await a.tryReserve('p2', 'a3', 1, 0);
    await b.tryReserve('p1', 'b1', 1, 0);
    expect(await a.releaseAllForInstance()).toBe(3);
    expect(await a.releaseAllForInstance()).toBe(0);
    expect((await a.usage('p1')).reservations.map((r) => r.agentId)).toEqual(['b1']);
    expect((await a.usage('p2')).reservations).toEqual([]);
  });

  it('errors on a cap mismatch; updateCap rewrites the cap for everyone', async () => {
    const a = ledger('orch-a');
    const b = ledger('orch-b');
    a.registerPool('p', { maxCpu: 4 });
    b.registerPool('p', { maxCpu: 8 });
    await a.tryReserve('p', 'a1', 1, 0);
    const err = await b.tryReserve('p', 'b1', 1, 0).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LedgerError);
    expect((err as LedgerError).code).toBe('cap-mismatch');
    expect((err as Error).message).toContain('every orchestrator on the host must declare the same cap');
    expect(() => a.registerPool('p', { maxCpu: 6 })).toThrow(/use updateCap/);

    await b.updateCap('p', { maxCpu: 8 });
    expect((await rawFile('p')).cap).toEqual({ maxCpu: 8, maxMemoryBytes: null });
    expect((await b.tryReserve('p', 'b1', 1, 0)).ok).toBe(true);
    await expect(a.tryReserve('p', 'a2', 1, 0)).rejects.toMatchObject({ code: 'cap-mismatch' });
    await a.updateCap('p', { maxCpu: 8 });
    expect((await a.tryReserve('p', 'a2', 1, 0)).ok).toBe(true);
    // Releasing never depends on agreeing about the cap.
    const c = ledger('orch-c');
    c.registerPool('p', { maxCpu: 1 });
    expect(await c.release('p', 'nothing')).toBe(false);
  });

  it('errors on an unknown file version and on garbage', async () => {
    const a = ledger('orch-a');
    a.registerPool('p', { maxCpu: 4 });
    await writeFile(poolFilePath(dir, 'p'), JSON.stringify({ version: 2, cap: {}, reservations: [] }));
    await expect(a.tryReserve('p', 'x', 1, 0)).rejects.toMatchObject({ code: 'unknown-version' });
    await writeFile(poolFilePath(dir, 'p'), '{"version":1,');
    await expect(a.tryReserve('p', 'x', 1, 0)).rejects.toMatchObject({ code: 'corrupt' });
    await writeFile(poolFilePath(dir, 'p'), JSON.stringify({ version: 1, cap: {}, reservations: [{}] }));
    await expect(a.usage('p')).rejects.toMatchObject({ code: 'corrupt' });
  });

  it('refuses an unregistered pool and bad requests', async () => {
    const a = ledger('orch-a');
    await expect(a.tryReserve('nope', 'x', 1, 0)).rejects.toMatchObject({ code: 'unregistered-pool' });
    a.registerPool('p', {});
    await expect(a.tryReserve('p', 'x', -1, 0)).rejects.toMatchObject({ code: 'invalid' });
    await expect(a.tryReserve('p', 'x', Number.NaN, 0)).rejects.toMatchObject({ code: 'invalid' });
    expect(() => a.registerPool('q', { maxCpu: -2 })).toThrow(LedgerError);
    expect(() => new MachineLedger({ dir, instanceId: '' })).toThrow(/instance id/);
  });

  it('keeps pool names with path characters inside the directory', async () => {
    const a = ledger('orch-a');
    a.registerPool('../escape/me', { maxCpu: 1 });
    expect((await a.tryReserve('../escape/me', 'x', 1, 0)).ok).toBe(true);
    expect(await readdir(dir)).toEqual(['..%2Fescape%2Fme.json']);
  });

  it('writes atomically: concurrent readers always see a whole file, no temp files remain', async () => {
    const a = ledger('orch-a');
    const b = ledger('orch-b');
    for (const l of [a, b]) l.registerPool('p', { maxCpu: 1_000 });
    let writing = true;
    let reads = 0;
    const reader = (async () => {
      while (writing) {
        const text = await readFile(poolFilePath(dir, 'p'), 'utf8').catch(() => undefined);
        if (text !== undefined) {
          expect(() => JSON.parse(text)).not.toThrow();
          reads += 1;
        }
        await new Promise((r) => setImmediate(r));
      }
    })();
    const work = (l: MachineLedger, prefix: string): Promise<unknown> =>
      (async () => {
        for (let i = 0; i < 40; i++) {
          await l.tryReserve('p', `${prefix}${i}`, 1, 0);
          if (i % 3 === 0) await l.release('p', `${prefix}${i}`);
        }
      })();
    await Promise.all([work(a, 'a'), work(b, 'b')]);
    writing = false;
    await reader;
    expect(reads).toBeGreaterThan(0);
    expect((await a.usage('p')).reservations).toHaveLength(2 * (40 - 14));
    expect((await readdir(dir)).sort()).toEqual(['p.json']);
  });

  describe('dead rows', () => {
    const row = {
      instanceId: 'me',
      pid: 123,
      bootId: 'boot-1',
      agentId: 'x',
      cpus: 1,
      memBytes: 0,
      reservedAt: 0,
    };
    const ctx = { bootId: 'boot-1', instanceId: 'me', isAlive: () => false, probeOtherInstances: false };

    it('applies the rule: other boot dead; own instance probed; others probed only when enabled', () => {
      expect(isRowDead({ ...row, bootId: 'boot-0' }, { ...ctx, isAlive: () => true })).toBe(true);
      expect(isRowDead(row, ctx)).toBe(true);
      expect(isRowDead(row, { ...ctx, isAlive: () => true })).toBe(false);
      expect(isRowDead({ ...row, instanceId: 'peer' }, ctx)).toBe(false);
      expect(isRowDead({ ...row, instanceId: 'peer' }, { ...ctx, probeOtherInstances: true })).toBe(true);
    });

    it('drops rows from a previous boot before summing', async () => {
      const before = ledger('orch-a', { bootId: 'boot-0' });
      before.registerPool('p', { maxCpu: 2 });
      await before.tryReserve('p', 'old', 2, 0);
      const now = ledger('orch-a', { bootId: 'boot-1' });
      now.registerPool('p', { maxCpu: 2 });
      expect((await now.usage('p')).usedCpu).toBe(0);
      expect((await now.tryReserve('p', 'new', 2, 0)).ok).toBe(true);
      expect((await rawFile('p')).reservations).toHaveLength(1);
    });

    it('the periodic reaper runs at start and then on every interval of the injected clock', async () => {
      const clock = new ManualClock();
      const alive = new Set<number>([process.pid]);
      const writer = ledger('orch-a');
      writer.registerPool('p', { maxCpu: 8 });
      await writer.tryReserve('p', 'x', 1, 0);
      await writer.tryReserve('p', 'y', 1, 0);
      const reaper = ledger('orch-a', { clock, isAlive: (pid) => alive.has(pid) });
      reaper.registerPool('p', { maxCpu: 8 });
      reaper.start(30_000);
      // The next pass is scheduled only once the first one has finished.
      await vi.waitFor(() => expect(clock.pendingTimers()).toBe(1));
      expect((await rawFile('p')).reservations).toHaveLength(2);
      alive.clear();
      clock.advance(29_999);
      await flush();
      expect((await rawFile('p')).reservations).toHaveLength(2);
      clock.advance(1);
      await reaper.stop();
      expect((await rawFile('p')).reservations).toHaveLength(0);
      expect(clock.pendingTimers()).toBe(0);
    });
  });
});
