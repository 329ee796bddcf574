/**
 * The chaos suite's container cells, on the engine this run targets (Docker or Podman): a burst of
 * jobs with one fault mid-step, then jobs lost, run twice and containers left (by `scaler audit`
 * and from the engine). Prints this engine's column of the chaos table.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { CONTAINER_FAULTS, runContainerCell } from '../../chaos/container-cell.js';
import { ChaosTable, passed } from '../../chaos/matrix.js';
import { ENGINE, removeScalerContainers } from '../../helpers/engine.js';

const table = new ChaosTable();
const names: string[] = [];

afterAll(async () => {
  await removeScalerContainers(...names);
  console.log(
    `\nchaos table, ${ENGINE} column (leaked = by scaler audit / from the engine)\n${table.markdown()}\n`,
  );
});

describe(`chaos: container on ${ENGINE}`, () => {
  for (const [i, fault] of CONTAINER_FAULTS.entries())
    it(`${fault}: nothing lost, nothing run twice, nothing left`, async () => {
      const name = `chaos${i}-${ENGINE}`;
      names.push(name);
      await removeScalerContainers(name);
      try {
        table.set(fault, ENGINE, { status: 'ran', outcome: await runContainerCell(fault, name) });
      } catch (err) {
        table.set(fault, ENGINE, { status: 'error', error: (err as Error).message });
        throw err;
      }
      const cell = table.get(fault, ENGINE)!;
      expect(passed(cell), JSON.stringify(cell)).toBe(true);
    });
});
