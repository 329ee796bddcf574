import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { firecrackerNetworkSchema, scalerFileSchema } from '../../../../src/config/index.js';
import { VmScalerBackend } from '../../../../src/scaler/backends/firecracker/backend.js';
import { HostNet } from '../../../../src/scaler/backends/firecracker/host-net.js';
import { InMemoryIpAllocator } from '../../../../src/scaler/backends/firecracker/ip-allocator.js';
import {
  PeriodicSweep,
  VM_ORPHAN_SWEEP_INTERVAL_MS,
} from '../../../../src/scaler/backends/firecracker/periodic-sweep.js';
import type { VmmDriver } from '../../../../src/scaler/backends/firecracker/vmm.js';
import { ManualClock } from '../../../../src/util/clock.js';

const MIN = 60_000;
const log = pino({ level: 'silent' });
/** Let promise callbacks run (the sweep's completion re-arms the timer). */
const settle = () => new Promise((r) => setImmediate(r));

describe('periodic VM orphan sweep', () => {
  it('runs every 15 minutes on the injected clock', async () => {
    expect(VM_ORPHAN_SWEEP_INTERVAL_MS).toBe(15 * MIN);
    const clock = new ManualClock();
    let runs = 0;
    const p = new PeriodicSweep(clock, VM_ORPHAN_SWEEP_INTERVAL_MS, () => (runs++, Promise.resolve()), log);
    p.start();
    p.start(); // a second start does not add a second timer
    clock.advance(15 * MIN - 1);
    expect(runs).toBe(0);
    clock.advance(1);
    expect(runs).toBe(1);
    await settle();
    clock.advance(15 * MIN);
    await settle();
    clock.advance(15 * MIN);
    expect(runs).toBe(3);
    await p.stop();
  });

  it('never overlaps itself: a slow sweep delays the next one; a failed one does not end the series', async () => {
    const clock = new ManualClock();
    let running = 0;
    let maxRunning = 0;
    let runs = 0;
    const finish: (() => void)[] = [];
    const p = new PeriodicSweep(
      clock,
      15 * MIN,
      () => {
        runs++;
        running++;
        maxRunning = Math.max(maxRunning, running);
        return new Promise<void>((ok, fail) =>
          finish.push(() => {
            running--;
            if (runs === 1) fail(new Error('ip: device busy'));
            else ok();
          }),
        );
      },
      log,
    );
    p.start();
    clock.advance(15 * MIN);
    expect(runs).toBe(1);
    clock.advance(60 * MIN); // the first run is still going: nothing else starts
    expect(runs).toBe(1);
    expect(clock.pendingTimers()).toBe(0);
    finish.shift()!();
    await settle();
    clock.advance(15 * MIN);
    expect(runs).toBe(2);
    expect(maxRunning).toBe(1);
    finish.shift()!();
    await p.stop();
  });

  it('stop waits for a run in progress and arms nothing after it', async () => {
    const clock = new ManualClock();
    let runs = 0;
    let done: () => void = () => {};
    const p = new PeriodicSweep(clock, 15 * MIN, () => (runs++, new Promise<void>((r) => (done = r))), log);
    p.start();
    clock.advance(15 * MIN);
    let stopped = false;
    const stopping = p.stop().then(() => (stopped = true));
    await settle();
    expect(stopped).toBe(false);
    done();
    await stopping;
    expect(clock.pendingTimers()).toBe(0);
    clock.advance(60 * MIN);
    expect(runs).toBe(1);
    p.start(); // stopped for good
    expect(clock.pendingTimers()).toBe(0);
  });

  describe('in the VM backend', () => {
    let base: string;
    beforeAll(async () => {
      base = await mkdtemp(join(tmpdir(), 'kici-sweep-'));
    });
    afterAll(() => rm(base, { recursive: true, force: true }));

    it("reaps a dead VM's lease on the next tick, not before; shutdownAll stops the series", async () => {
      const network = firecrackerNetworkSchema.parse({});
      const [entry] = scalerFileSchema.parse({
        version: 1,
        scalers: [
          {
            name: 'sweepy',
            type: 'firecracker',
            vmm: 'qemu',
            kernelPath: '/k',
            chrootBaseDir: base,
            maxAgents: 1,
            labelSets: [{ labels: ['vm'], rootfsPath: '/r' }],
          },
        ],
      }).scalers;
      const allocator = new InMemoryIpAllocator('sweepy', network.cidr, network.gateway);
      const driver: VmmDriver = {
        kind: 'qemu',
        describe: () => 'none',
        start: () => Promise.reject(new Error('not in this test')),
        stop: () => Promise.resolve(),
        owns: () => Promise.resolve(false),
      };
      const clock = new ManualClock();
      const backend = new VmScalerBackend({
        entry: entry!,
        network,
        driver,
        allocator,
        hostNet: new HostNet(() => Promise.resolve('')),
        run: () => Promise.resolve(''),
        isolation: undefined,
        logger: log,
        resolvePath: (p) => p,
        clock,
      });
      backend.startPeriodicSweep();
      // A lease whose VM is gone (no directory, no process), as a crash between sweeps leaves it.
      await allocator.allocate('sweepy-vm-deadbeef');
      clock.advance(15 * MIN - 1);
      await settle();
      expect(await allocator.getAllocations()).toHaveLength(1);
      clock.advance(1);
      // The sweep reads /proc; give it real time to finish.
      for (let i = 0; i < 250 && (await allocator.getAllocations()).length; i++)
        await new Promise((r) => setTimeout(r, 20));
      expect(await allocator.getAllocations()).toHaveLength(0);
      await backend.shutdownAll();
      expect(clock.pendingTimers()).toBe(0);
    });
  });
});
