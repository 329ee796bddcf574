/**
 * Import-cycle check for src/, run by `npm run lint`. Type-only imports count: a type-level cycle
 * still couples two modules (import-x/no-cycle skips them, which is why this is our own script).
 * Exit 1 when a cycle exists that is not in KNOWN_CYCLES, or when a KNOWN_CYCLES entry is gone.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/**
 * Cycles tolerated for now. Empty, and meant to stay so: an entry is only for a cycle a change is
 * known to leave behind, and a stale entry fails the check so it cannot outlive its cycle.
 */
const KNOWN_CYCLES: string[][] = [];

const SPECIFIER =
  /(?:^|[\s;])(?:import|export)\s[^'"`;]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g;

export type ImportGraph = Map<string, string[]>;

function listTs(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const p = join(dir, d.name);
    if (d.isDirectory()) return listTs(p);
    return d.name.endsWith('.ts') && !d.name.endsWith('.d.ts') ? [p] : [];
  });
}

/** Relative imports of every .ts file under `root`, as repo-relative paths (`.js` specifiers map to `.ts`). */
export function buildImportGraph(repo: string, root = 'src'): ImportGraph {
  const graph: ImportGraph = new Map();
  const files = listTs(resolve(repo, root));
  const known = new Set(files);
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    const deps = new Set<string>();
    for (const m of text.matchAll(SPECIFIER)) {
      const spec = m[1] ?? m[2]!;
      if (!spec.startsWith('.')) continue;
      const target = resolve(dirname(file), spec.replace(/\.js$/, '.ts'));
      if (known.has(target)) deps.add(relative(repo, target));
    }
    graph.set(relative(repo, file), [...deps].sort());
  }
  return graph;
}

/** Strongly connected components with more than one module (or a module importing itself), sorted. */
export function findCycles(graph: ImportGraph): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const scc: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      scc.push(w);
    } while (w !== v);
    if (scc.length > 1 || graph.get(v)?.includes(v)) out.push(scc.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return out.sort((a, b) => a[0]!.localeCompare(b[0]!));
}

/** Problems to report: unexpected cycles and allowlist entries that no longer match a cycle. */
export function cycleProblems(cycles: string[][], allowed: string[][] = KNOWN_CYCLES): string[] {
  const key = (c: string[]) => [...c].sort().join(' <-> ');
  const found = new Set(cycles.map(key));
  const ok = new Set(allowed.map(key));
  return [
    ...cycles.filter((c) => !ok.has(key(c))).map((c) => `import cycle: ${key(c)}`),
    ...allowed
      .filter((c) => !found.has(key(c)))
      .map((c) => `KNOWN_CYCLES entry is stale (remove it): ${key(c)}`),
  ];
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const repo = resolve(dirname(new URL(import.meta.url).pathname), '..');
  const problems = cycleProblems(findCycles(buildImportGraph(repo)));
  for (const p of problems) console.error(p);
  process.exit(problems.length ? 1 : 0);
}
