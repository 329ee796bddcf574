/**
 * The chaos suite's container cells, on the engine this run targets (Docker or Podman): a burst of
 * jobs with one fault mid-step, then jobs lost, run twice and containers left (by `scaler audit`
 * and from the engine). Prints this engine's column of the chaos table. The cells run in lanes side
 * by side: each has its own scaler name, orchestrator, token file and database.
 */
import { afterAll, describe, expect, it } from 'vitest';
import {
  CONTAINER_FAULTS,
  CONTAINER_SERVE_FAULTS,
  runContainerCell,
  runContainerServeCell,
} from '../../chaos/container-cell.js';
import { interleave, Lanes, LANE_TIMEOUT } from '../../chaos/lanes.js';
import { ChaosTable, passed, type CellOutcome, type Fault } from '../../chaos/matrix.js';
import { ENGINE, removeScalerContainers } from '../../helpers/engine.js';

const table = new ChaosTable();
const names: string[] = [];
const lanes = new Lanes();
const took = new Map<Fault, number>();

afterAll(async () => {
  await removeScalerContainers(...names);
  const times = [...took].map(([f, ms]) => `${f}: ${Math.round(ms / 1000)} s`).join(', ');
  console.log(
    `\nchaos table, ${ENGINE} column (leaked = by scaler audit / from the engine)\n${table.markdown()}\ncell durations: ${times}\n`,
  );
});

type Runner = (fault: Fault, name: string) => Promise<CellOutcome>;
const runner = (f: Fault): Runner =>
  CONTAINER_SERVE_FAULTS.includes(f) ? runContainerServeCell : runContainerCell;
/**
 * Two lanes, about as long as each other (the disk and clock cells hold their steps longest, and
 * lead their lanes). Not four: the two engine suites and the system suite's chaos lanes run at
 * once, and eight container cells beside them starved serve starts and heartbeats on a 2-core host.
 */
const LANE_FAULTS: Fault[][] = [
  ['data-dir disk full', 'PostgreSQL restart', 'agent killed mid-step', 'kill -9 orchestrator'],
  ['wall clock ±1 h', 'kill -9 cluster leader', 'engine outage', 'nft flush ruleset'],
];
const all = [...CONTAINER_FAULTS, ...CONTAINER_SERVE_FAULTS];
const laned = LANE_FAULTS.flat();
if (all.length !== laned.length || !all.every((f) => laned.includes(f)))
  throw new Error(`every container fault needs a lane: ${all.join(', ')}`);
const byLane: Record<string, [number, Fault, Runner][]> = Object.fromEntries(
  LANE_FAULTS.map((faults, l) => [`l${l}`, faults.map((f) => [all.indexOf(f), f, runner(f)])]),
);

describe(`chaos: container on ${ENGINE}`, () => {
  for (const [lane, [i, fault, runCell]] of interleave(byLane))
    it.concurrent(
      `${fault}: nothing lost, nothing run twice, nothing left`,
      async () => {
        const name = `chaos${i}-${ENGINE}`;
        names.push(name);
        await lanes.run(lane, async () => {
          const t0 = Date.now();
          await removeScalerContainers(name);
          try {
            table.set(fault, ENGINE, { status: 'ran', outcome: await runCell(fault, name) });
          } catch (err) {
            table.set(fault, ENGINE, { status: 'error', error: (err as Error).message });
            throw err;
          } finally {
            took.set(fault, Date.now() - t0);
          }
        });
        const cell = table.get(fault, ENGINE)!;
        expect(passed(cell), JSON.stringify(cell)).toBe(true);
      },
      LANE_TIMEOUT,
    );
});
