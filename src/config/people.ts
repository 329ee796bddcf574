/**
 * The loader for CLIs and the server: every problem of every file as lines a person can
 * act on, plus warnings, instead of the first exception.
 */
import { YAMLError } from 'yaml';
import {
  formatConfigError,
  formatLocated,
  isConfigInputError,
  locate,
  type ConfigErrorContext,
} from './format-errors.js';
import { isPlainObject, readConfigSources } from './loader.js';
import { SCALER_PARSE_PARAMS } from './messages.js';
import {
  findDuplicateScalerNames,
  findLabelSetOverlaps,
  formatLabelSetOverlap,
  type ScalerLabelSetsLike,
} from './overlaps.js';
import { errorOrigin, tagError, type ConfigSources } from './provenance.js';
import { createScalerFileSchema, scalerFileSchema, type ScalerConfig } from './schema.js';
import { collectConfigWarnings } from './warnings.js';

export type PeopleLoadResult =
  | {
      ok: true;
      config: ScalerConfig;
      warnings: string[];
      /** The file each merged `scalers[i]` was written in (the main file or a drop-in). */
      scalerFiles?: string[];
    }
  | { ok: false; problems: string[] };

export interface PeopleLoadOptions {
  /** Host the config is checked for (default: this one); only the Windows batch-file rule reads it. */
  hostPlatform?: NodeJS.Platform;
}

const schemaByPlatform = new Map<NodeJS.Platform, typeof scalerFileSchema>([
  [process.platform, scalerFileSchema],
]);

function schemaFor(platform: NodeJS.Platform): typeof scalerFileSchema {
  let schema = schemaByPlatform.get(platform);
  if (!schema) {
    schema = createScalerFileSchema({ hostPlatform: platform });
    schemaByPlatform.set(platform, schema);
  }
  return schema;
}

/**
 * Scalers as far as the cross-scaler checks need them, read leniently from the merged
 * document so those checks also run when some other field is invalid.
 */
function scalersForChecks(merged: unknown): { entries: ScalerLabelSetsLike[]; indexOf: number[] } {
  const entries: ScalerLabelSetsLike[] = [];
  const indexOf: number[] = [];
  const scalers = isPlainObject(merged) && Array.isArray(merged.scalers) ? merged.scalers : [];
  scalers.forEach((entry, i) => {
    if (!isPlainObject(entry) || typeof entry.name !== 'string') return;
    const sets = Array.isArray(entry.labelSets) ? entry.labelSets : [];
    entries.push({
      name: entry.name,
      labelSets: sets.map((set) => ({
        labels:
          isPlainObject(set) && Array.isArray(set.labels)
            ? set.labels.filter((l) => typeof l === 'string')
            : [],
      })),
    });
    indexOf.push(i);
  });
  return { entries, indexOf };
}

/** Duplicate names and label-set overlaps, each as a line at the later declaration. */
export function crossScalerProblems(sources: ConfigSources): string[] {
  const ctx: ConfigErrorContext = { configPath: sources.configPath, sources };
  const { entries, indexOf } = scalersForChecks(sources.merged);
  const at = (path: PropertyKey[]): string => {
    const loc = locate(path, ctx);
    return `${loc.file}: scalers[${String(loc.path[1])}]`;
  };
  const problems: string[] = [];
  for (const dup of findDuplicateScalerNames(entries)) {
    const [first, ...rest] = dup.indices.map((i) => indexOf[i]!);
    for (const i of rest) {
      const message = `duplicate scaler name "${dup.name}" (first defined at ${at(['scalers', first!])})`;
      problems.push(formatLocated(locate(['scalers', i, 'name'], ctx), message));
    }
  }
  for (const o of findLabelSetOverlaps(entries)) {
    // An empty set is already a schema problem; overlapping on it would only repeat that.
    if (o.labels === '') continue;
    const path = ['scalers', indexOf[o.scalerIndex]!, 'labelSets', o.labelSetIndex, 'labels'];
    problems.push(formatLocated(locate(path, ctx), formatLabelSetOverlap(o)));
  }
  return problems;
}

export async function loadScalerConfigForPeople(
  configPath: string,
  scalersDirPath?: string,
  opts: PeopleLoadOptions = {},
): Promise<PeopleLoadResult> {
  const sources = await readConfigSources(configPath, scalersDirPath);
  const ctx: ConfigErrorContext = { configPath, sources };
  if (sources.failures.length > 0) {
    // Anything else is a bug in this program; let it surface as one.
    const unexpected = sources.failures.find((f) => !isConfigInputError(f));
    if (unexpected !== undefined) throw unexpected;
    return {
      ok: false,
      problems: unique(firstYamlErrorPerFile(sources.failures).flatMap((f) => formatConfigError(f, ctx))),
    };
  }
  const result = schemaFor(opts.hostPlatform ?? process.platform).safeParse(
    sources.merged,
    SCALER_PARSE_PARAMS,
  );
  const problems = [
    ...(result.success ? [] : formatConfigError(result.error, ctx)),
    ...crossScalerProblems(sources),
  ];
  if (!result.success || problems.length > 0) return { ok: false, problems: unique(problems) };
  return {
    ok: true,
    config: result.data,
    warnings: unique(collectConfigWarnings(sources, result.data)),
    scalerFiles: sources.origins.map((o) => o.file),
  };
}

/**
 * YAML errors after the first in a file are usually echoes of it (one missing bracket
 * breaks every later line), so only the first is shown, with a count of the rest.
 */
function firstYamlErrorPerFile(failures: unknown[]): unknown[] {
  const firstByFile = new Map<string, YAMLError>();
  const extra = new Map<string, number>();
  const kept: unknown[] = [];
  for (const f of failures) {
    const file = errorOrigin(f)?.path;
    if (!(f instanceof YAMLError) || file === undefined) {
      kept.push(f);
    } else if (firstByFile.has(file)) {
      extra.set(file, (extra.get(file) ?? 0) + 1);
    } else {
      firstByFile.set(file, f);
      kept.push(f);
    }
  }
  for (const [file, n] of extra) {
    const first = firstByFile.get(file)!;
    // Reported through a copy so the original error object stays as thrown.
    const copy = Object.assign(Object.create(Object.getPrototypeOf(first) as object) as YAMLError, first, {
      message: `${first.message.split('\n')[0]} (and ${n} more YAML error${n === 1 ? '' : 's'} after it, often caused by this one)`,
    });
    tagError(copy, { path: file, kind: 'file' });
    kept[kept.indexOf(first)] = copy;
  }
  return kept;
}

function unique(lines: string[]): string[] {
  return [...new Set(lines)];
}
