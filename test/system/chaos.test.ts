/**
 * The chaos suite (`npm run chaos`, also part of the system tier), on bare-metal and on the event
 * backend: a burst of jobs with one fault injected mid-step, then the count of jobs lost, jobs run
 * twice and resources left (by `scaler audit` and from the host). Prints the fault × backend
 * table; a cell without a runner shows "not run". KICI_CHAOS_TABLE=<file> also writes it there.
 */
import { writeFile } from 'node:fs/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { BARE_METAL_FAULTS, runBareMetalCell } from '../chaos/serve-cell.js';
import { EVENT_FAULTS, runEventCell } from '../chaos/event-cell.js';
import { BACKENDS, ChaosTable, FAULTS, passed, type Backend, type Fault } from '../chaos/matrix.js';

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

describe('chaos: bare-metal', () => {
  for (const fault of BARE_METAL_FAULTS)
    it(`${fault}: nothing lost, nothing run twice, nothing left`, async () => {
      try {
        const outcome = await runBareMetalCell(fault);
        table.set(fault, 'bare-metal', { status: 'ran', outcome });
      } catch (err) {
        table.set(fault, 'bare-metal', { status: 'error', error: (err as Error).message });
        throw err;
      }
      const cell = table.get(fault, 'bare-metal')!;
      expect(passed(cell), JSON.stringify(cell)).toBe(true);
    });
});

describe('chaos: event (a stand-in cloud booting instances on this host)', () => {
  for (const fault of EVENT_FAULTS)
    it(`${fault}: nothing lost, nothing run twice, nothing left`, async () => {
      try {
        table.set(fault, 'event', { status: 'ran', outcome: await runEventCell(fault) });
      } catch (err) {
        table.set(fault, 'event', { status: 'error', error: (err as Error).message });
        throw err;
      }
      const cell = table.get(fault, 'event')!;
      expect(passed(cell), JSON.stringify(cell)).toBe(true);
    });
});
