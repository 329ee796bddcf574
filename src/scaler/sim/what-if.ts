import type { ScalerConfig } from '../../config/index.js';
import { errorMessage } from '../../util/errors.js';
import { renderChart } from './chart.js';
import { renderComparison, runSimulation, spawnSource, type RunOptions, type SimReport } from './report.js';
import type { TraceJob } from './trace.js';

/** One what-if: the proposed config (and the current one, when there is one) over the same trace. */
export interface WhatIfInput {
  proposed: ScalerConfig;
  current?: ScalerConfig | undefined;
  trace: readonly TraceJob[];
  opts: RunOptions;
}

export interface WhatIfResult {
  proposed: SimReport;
  current?: SimReport;
  /** The side-by-side table `scaler simulate` prints. */
  table: string;
  /** Queue wait and agents over time, both configs. */
  svg: string;
}

/** The first scaler of either config with no spawn time, as the message `spawnTimeOf` gives. */
export function missingSpawnTime(input: Omit<WhatIfInput, 'trace'>): string | undefined {
  for (const config of [input.current, input.proposed]) {
    for (const e of config?.scalers ?? []) {
      try {
        spawnSource(input.opts, e);
      } catch (err) {
        return errorMessage(err);
      }
    }
  }
  return undefined;
}

export function whatIf(input: WhatIfInput): WhatIfResult {
  const proposed = runSimulation(input.proposed, input.trace, input.opts);
  const current = input.current ? runSimulation(input.current, input.trace, input.opts) : undefined;
  const out: WhatIfResult = {
    proposed,
    table: renderComparison(proposed, current),
    svg: renderChart(proposed, current),
  };
  if (current) out.current = current;
  return out;
}
