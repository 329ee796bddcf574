/**
 * Scaler files for tests: parsed the way the loader parses them, and bare-metal entries with the
 * fields every test needs.
 */
import { scalerFileSchema, type ScalerConfig, type ScalerConfigInput } from '../../src/config/index.js';

/** Parse a scaler file the way the loader does (defaults applied, rules checked). */
export function scalerConfig(input: ScalerConfigInput | Record<string, unknown>): ScalerConfig {
  return scalerFileSchema.parse(input);
}

/** A parsed config as it is; file input parsed with the real schema. */
export function parsedScalerConfig(
  c: ScalerConfig | ScalerConfigInput | Record<string, unknown>,
): ScalerConfig {
  return isParsed(c) ? c : scalerConfig(c);
}

function isParsed(c: ScalerConfig | ScalerConfigInput | Record<string, unknown>): c is ScalerConfig {
  // A parsed config always carries the defaulted globalMaxAgents and per-entry defaults.
  const scalers = (c as { scalers?: unknown }).scalers;
  return (
    typeof (c as ScalerConfig).globalMaxAgents === 'number' &&
    Array.isArray(scalers) &&
    scalers.every(
      (s) =>
        typeof s === 'object' &&
        s !== null &&
        'maxConcurrentSpawns' in s &&
        'mandatoryLabels' in s &&
        'networkIsolation' in s,
    )
  );
}

/** A bare-metal entry input with the fields every test needs; `labelSets` may be plain label lists. */
export function bareMetal(
  name: string,
  labelSets: (string[] | Record<string, unknown>)[],
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    name,
    type: 'bare-metal',
    maxAgents: 10,
    labelSets: labelSets.map((ls) =>
      Array.isArray(ls)
        ? { labels: ls, binaryPath: '/opt/kici/agent' }
        : { binaryPath: '/opt/kici/agent', ...ls },
    ),
    ...extra,
  };
}
