/**
 * The chaos suite (`npm run chaos`, also part of the system tier), on bare-metal, on micro-VMs
 * (QEMU) and on the event backend: a burst of jobs with one fault injected mid-step, then the count
 * of jobs lost, jobs run twice and resources left (by `scaler audit` and from the host). Prints the
 * fault × backend table; a cell without a runner shows "not run". KICI_CHAOS_TABLE=<file> also
 * writes it there.
 */
import { writeFile } from 'node:fs/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { BARE_METAL_FAULTS, runBareMetalCell } from '../chaos/serve-cell.js';
import { EVENT_FAULTS, runEventCell } from '../chaos/event-cell.js';
import {
  BACKENDS,
  ChaosTable,
  FAULTS,
  passed,
  type Backend,
  type CellOutcome,
  type Fault,
} from '../chaos/matrix.js';
import { interleave, Lanes, LANE_TIMEOUT } from '../chaos/lanes.js';
import { runVmCell, VM_FAULTS, VM_SLOTS } from '../chaos/vm-cell.js';

const table = new ChaosTable();

/** Faults that do not exist for a backend: no container engine, no host firewall of its own. */
const NOT_APPLICABLE: Partial<Record<Backend, Partial<Record<Fault, string>>>> = {
  'bare-metal': {
    'engine outage': 'no container engine',
    'nft flush ruleset': 'no firewall rules of its own',
  },
  qemu: { 'engine outage': 'no container engine' },
  event: {
    'engine outage': 'no container engine',
    'nft flush ruleset': 'no host firewall',
  },
};

for (const b of BACKENDS)
  for (const f of FAULTS) {
    const why = NOT_APPLICABLE[b]?.[f];
    table.set(f, b, why ? { status: 'n/a', why } : { status: 'not run', why: 'no runner for this cell yet' });
  }

afterAll(async () => {
  const md = table.markdown();
  console.log(`\nchaos table (leaked = by scaler audit / from the host)\n${md}\n`);
  if (process.env.KICI_CHAOS_TABLE) await writeFile(process.env.KICI_CHAOS_TABLE, `${md}\n`);
});

/** Each cell has its own serve, scaler, subnet and token file, so the lanes share nothing. */
const lanes = new Lanes();

interface CellRun {
  backend: Backend;
  fault: Fault;
  run: (f: Fault) => Promise<CellOutcome>;
}

const byLane: Record<string, CellRun[]> = {
  'bare-metal': BARE_METAL_FAULTS.map((fault) => ({
    backend: 'bare-metal' as const,
    fault,
    run: runBareMetalCell,
  })),
  // The event backend: a stand-in cloud booting instances on this host.
  event: EVENT_FAULTS.map((fault) => ({ backend: 'event' as const, fault, run: runEventCell })),
  // The VM lanes (VM_SLOTS), each on its own bridge and subnet.
  ...Object.fromEntries(
    VM_SLOTS.map((slot) => [
      `vm${slot}`,
      VM_FAULTS.filter((_, i) => i % VM_SLOTS.length === slot).map((fault) => ({
        backend: 'qemu' as const,
        fault,
        run: (f: Fault) => runVmCell(f, slot),
      })),
    ]),
  ),
};

const order = interleave(byLane);

describe('chaos', () => {
  for (const [lane, { backend, fault, run }] of order)
    it.concurrent(
      `${backend}, ${fault}: nothing lost, nothing run twice, nothing left`,
      async () => {
        await lanes.run(lane, async () => {
          try {
            table.set(fault, backend, { status: 'ran', outcome: await run(fault) });
          } catch (err) {
            table.set(fault, backend, { status: 'error', error: (err as Error).message });
            throw err;
          }
        });
        const cell = table.get(fault, backend)!;
        expect(passed(cell), JSON.stringify(cell)).toBe(true);
      },
      LANE_TIMEOUT,
    );
});
