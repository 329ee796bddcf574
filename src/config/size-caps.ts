/**
 * Bounds on a config file, checked before it is validated. Checking (with "did you mean" for every
 * unknown key, and line numbers for every problem) costs more than linear time in the number of
 * keys, and a reload runs on the server's event loop: a file far larger than any real config would
 * stall every connection while it is judged. Real configs stay far below these.
 */

/** The largest config file read (a hundred scalers with comments take well under 1 MiB). */
export const MAX_CONFIG_FILE_BYTES = 4 * 1024 * 1024;
/** The most keys one mapping may have: no object in the schema has more than a few dozen. */
export const MAX_KEYS_PER_MAPPING = 256;
/** The most mapping keys and list items in one file, all levels together. */
export const MAX_CONFIG_NODES = 100_000;

/** Why a config file's text is too large to read, or undefined. */
export function fileSizeProblem(file: string, bytes: number): string | undefined {
  if (bytes <= MAX_CONFIG_FILE_BYTES) return undefined;
  return `${file}: ${bytes} bytes; a config file may be at most ${MAX_CONFIG_FILE_BYTES} (split scalers into scalers.d/ files, or remove what is not config)`;
}

/** Why a parsed config value is too large to check, or undefined. Stops at the first bound crossed. */
export function shapeProblem(file: string, value: unknown): string | undefined {
  let nodes = 0;
  const stack: { value: unknown; path: string }[] = [{ value, path: '(root)' }];
  while (stack.length) {
    const { value: v, path } = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    const entries = Array.isArray(v)
      ? v.map((x, i) => [`[${i}]`, x] as const)
      : Object.entries(v as Record<string, unknown>).map(([k, x]) => [`.${k}`, x] as const);
    if (!Array.isArray(v) && entries.length > MAX_KEYS_PER_MAPPING)
      return `${file}: ${path}: ${entries.length} keys; a mapping in a scaler config has at most ${MAX_KEYS_PER_MAPPING}`;
    nodes += entries.length;
    if (nodes > MAX_CONFIG_NODES)
      return `${file}: more than ${MAX_CONFIG_NODES} keys and list items; a scaler config has far fewer (split it into scalers.d/ files?)`;
    for (const [k, x] of entries)
      stack.push({ value: x, path: path === '(root)' ? k.replace(/^\./, '') : `${path}${k}` });
  }
  return undefined;
}
