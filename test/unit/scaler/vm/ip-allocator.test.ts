import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DbIpAllocator,
  IpPoolExhaustedError,
  macFor,
  tapNameFor,
  usableAddresses,
} from '../../../../src/scaler/backends/firecracker/ip-allocator.js';
import { freshStore } from '../../../helpers/data-dir.js';

// A /28 has 14 host addresses; minus the gateway, 13 leases: small enough to hit exhaustion.
const CIDR = '10.9.8.16/28';
const GATEWAY = '10.9.8.17';
const FORBIDDEN = new Set(['10.9.8.16', '10.9.8.31', GATEWAY]);

type Op = { kind: 'spawn'; vm: number } | { kind: 'destroy'; vm: number };
const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('spawn' as const), vm: fc.integer({ min: 0, max: 20 }) }),
  fc.record({ kind: fc.constant('destroy' as const), vm: fc.integer({ min: 0, max: 20 }) }),
);

describe('VM IP allocator on PGlite', () => {
  let ctx: Awaited<ReturnType<typeof freshStore>>;
  beforeAll(async () => {
    ctx = await freshStore();
  });
  afterAll(() => ctx.close());

  it('never leases the network, broadcast or gateway address, and derives TAP and MAC', () => {
    const pool = usableAddresses(CIDR, GATEWAY);
    expect(pool).toHaveLength(13);
    for (const ip of pool) expect(FORBIDDEN.has(ip)).toBe(false);
    expect(macFor('10.9.8.18')).toBe('06:00:AC:09:08:12');
    expect(tapNameFor('vm-0123456789abcdef')).toBe('kici-89abcdef');
  });

  it('no address is leased twice under concurrent spawn/destroy; leases survive a restart and are reclaimed', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(opArb, { minLength: 1, maxLength: 8 }), { minLength: 1, maxLength: 6 }),
        fc.uniqueArray(fc.integer({ min: 0, max: 20 }), { maxLength: 6 }),
        async (batches, survivors) => {
          await ctx.store.db.deleteFrom('ip_allocations').execute();
          // Two allocators on one store: two scalers (or two processes) sharing the bridge.
          const a = new DbIpAllocator(ctx.store, 'vm-a', CIDR, GATEWAY);
          const b = new DbIpAllocator(ctx.store, 'vm-a', CIDR, GATEWAY);
          const live = new Map<string, string>();
          for (const batch of batches) {
            // Each batch runs concurrently: spawns race each other for the lowest free address.
            await Promise.all(
              batch.map(async (op, i) => {
                const id = `vm-${op.vm}`;
                const alloc = i % 2 ? a : b;
                if (op.kind === 'destroy') return alloc.release(id).then(() => ({ op, id }));
                return alloc.allocate(id).then(
                  (lease) => ({ op, id, lease }),
                  (err: unknown) => {
                    if (err instanceof IpPoolExhaustedError) return { op, id };
                    throw err;
                  },
                );
              }),
            );
            // Order of completion within a batch is not fixed; the store is the truth.
            const rows = await a.getAllocations();
            const ips = rows.map((r) => r.ip);
            expect(new Set(ips).size).toBe(ips.length);
            expect(new Set(rows.map((r) => r.vmId)).size).toBe(rows.length);
            for (const r of rows) {
              expect(FORBIDDEN.has(r.ip)).toBe(false);
              expect(usableAddresses(CIDR, GATEWAY)).toContain(r.ip);
              expect(r.mac).toBe(macFor(r.ip));
            }
            live.clear();
            for (const r of rows) live.set(r.vmId, r.ip);
          }
          // Simulated restart: a new allocator over the same store sees every lease...
          const restarted = new DbIpAllocator(ctx.store, 'vm-a', CIDR, GATEWAY);
          const before = await restarted.getAllocations();
          expect(new Map(before.map((l) => [l.vmId, l.ip]))).toEqual(live);
          // ...and reclaims exactly those whose VM did not survive.
          const surviving = new Set(survivors.map((n) => `vm-${n}`));
          const reclaimed = await restarted.reclaim(surviving);
          const after = await restarted.getAllocations();
          for (const l of after) expect(surviving.has(l.vmId)).toBe(true);
          expect(reclaimed.length + after.length).toBe(before.length);
          for (const [vm, ip] of live) {
            if (surviving.has(vm)) expect((await restarted.getAllocationForVm(vm))?.ip).toBe(ip);
          }
        },
      ),
      { numRuns: 40 },
    );
  });

  it('fills the pool, then refuses with "IP pool exhausted", then reuses a released address', async () => {
    await ctx.store.db.deleteFrom('ip_allocations').execute();
    const alloc = new DbIpAllocator(ctx.store, 'vm-b', CIDR, GATEWAY);
    const leases = await Promise.all(Array.from({ length: 13 }, (_, i) => alloc.allocate(`x-${i}`)));
    expect(new Set(leases.map((l) => l.ip)).size).toBe(13);
    await expect(alloc.allocate('x-13')).rejects.toThrow(/IP pool exhausted/);
    await alloc.release('x-4');
    expect((await alloc.allocate('x-13')).ip).toBe(leases.find((l) => l.vmId === 'x-4')!.ip);
  });

  it('reclaim leaves other scalers\u2019 leases alone', async () => {
    await ctx.store.db.deleteFrom('ip_allocations').execute();
    const mine = new DbIpAllocator(ctx.store, 'vm-c', CIDR, GATEWAY);
    const theirs = new DbIpAllocator(ctx.store, 'vm-d', CIDR, GATEWAY);
    await mine.allocate('m1');
    await theirs.allocate('t1');
    expect((await mine.reclaim(new Set())).map((l) => l.vmId)).toEqual(['m1']);
    expect((await theirs.getAllocations()).map((l) => l.vmId)).toEqual(['t1']);
  });
});
