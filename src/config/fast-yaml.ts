import jsYaml from 'js-yaml';

/**
 * The fast path for reading config files. The `yaml` package keeps a full document model (which the
 * error formatter needs for line numbers) and is several times slower on large files, so valid files
 * are read with js-yaml and the document model is built only when a problem must be located.
 *
 * YAML 1.2 core scalars plus merge keys (`<<: *base`), matching how the `yaml` package reads them.
 */
// `types` is exported at run time but missing from the published typings.
const { merge } = (jsYaml as unknown as { types: { merge: jsYaml.Type } }).types;
const SCHEMA = jsYaml.CORE_SCHEMA.extend({ implicit: [merge] });

/** A file that expands (through aliases) to more nodes than this is refused. */
export const MAX_EXPANDED_NODES = 1_000_000;

export type FastParse = { ok: true; value: unknown; warnings: string[] } | { ok: false };

export function fastParse(text: string, filename: string): FastParse {
  const warnings: string[] = [];
  let value: unknown;
  try {
    value = jsYaml.load(text, {
      filename,
      schema: SCHEMA,
      onWarning: (w) => warnings.push(w.message.split('\n')[0] ?? ''),
    });
  } catch {
    // Let the slow path produce the error: it reports positions the way the rest of the loader does.
    return { ok: false };
  }
  return expandedSize(value) <= MAX_EXPANDED_NODES ? { ok: true, value, warnings } : { ok: false };
}

/**
 * How many nodes the value has once aliases are expanded (aliases share objects here, but every
 * consumer walks them as copies). Recursive aliases count as infinite.
 */
export function expandedSize(root: unknown): number {
  const memo = new Map<object, number>();
  const visiting = new Set<object>();
  const size = (v: unknown): number => {
    if (typeof v !== 'object' || v === null) return 1;
    const known = memo.get(v);
    if (known !== undefined) return known;
    if (visiting.has(v)) return Infinity;
    visiting.add(v);
    let n = 1;
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      n += size(child);
      if (n > MAX_EXPANDED_NODES) break;
    }
    visiting.delete(v);
    memo.set(v, n);
    return n;
  };
  return size(root);
}
