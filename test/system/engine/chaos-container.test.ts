/**
 * The chaos suite's container cells, on the engine this run targets (Docker or Podman): a burst of
 * jobs with one fault mid-step, then jobs lost, run twice and containers left (by `scaler audit`
 * and from the engine). Prints this engine's column of the chaos table.
 */
import { afterAll, describe, expect, it } from 'vitest';
import {
  CONTAINER_FAULTS,
  CONTAINER_SERVE_FAULTS,
  runContainerCell,
  runContainerServeCell,
} from '../../chaos/container-cell.js';
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
  const cells = [
    ...CONTAINER_FAULTS.map((f) => [f, runContainerCell] as const),
    ...CONTAINER_SERVE_FAULTS.map((f) => [f, runContainerServeCell] as const),
  ];
  for (const [i, [fault, runCell]] of cells.entries())
    it(`${fault}: nothing lost, nothing run twice, nothing left`, async () => {
      const name = `chaos${i}-${ENGINE}`;
      names.push(name);
      await removeScalerContainers(name);
      try {
        table.set(fault, ENGINE, { status: 'ran', outcome: await runCell(fault, name) });
      } catch (err) {
        table.set(fault, ENGINE, { status: 'error', error: (err as Error).message });
        throw err;
      }
      const cell = table.get(fault, ENGINE)!;
      expect(passed(cell), JSON.stringify(cell)).toBe(true);
    });
});
