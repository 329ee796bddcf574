/**
 * Licence check for what we ship, run by `npm run licenses` (and so by CI). It walks the production
 * dependency tree from package.json on disk, the way Node resolves it (dev dependencies are never
 * followed), and checks each package's SPDX `license` against ALLOWED. Exit 1 names every package
 * whose licence is missing or not on the list.
 *
 * We walk node_modules instead of `npm ls --omit=dev`: npm ls rejects trees it calls "extraneous"
 * (a symlinked node_modules, a dev install) and would fail the check for reasons that are not about
 * licences.
 */
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/**
 * Licences a package may carry to be shipped with an Apache-2.0 project: the permissive licences of
 * the ASF's "Category A" list that appear on npm. Weak copyleft (MPL, EPL, LGPL) and strong copyleft
 * (GPL, AGPL) are left out on purpose: those need a human decision, recorded in REVIEWED.
 * Python-2.0 (the PSF licence stack) is in Category A; CC-BY-* is not listed, since it is a licence
 * for content, and a package carrying it deserves a look.
 */
export const ALLOWED = new Set([
  'Apache-2.0',
  'MIT',
  'MIT-0',
  'ISC',
  'BSD-2-Clause',
  'BSD-3-Clause',
  '0BSD',
  'BlueOak-1.0.0',
  'CC0-1.0',
  'Unlicense',
  'Zlib',
  'Python-2.0',
]);

/**
 * Packages checked by hand whose metadata the check cannot read (no SPDX field, "SEE LICENSE IN"),
 * keyed by name, with why they are fine. Empty, and meant to stay short; an entry that no longer
 * matches a failing package is reported as stale so that it cannot outlive its reason.
 */
const REVIEWED: Record<string, string> = {};

export interface PackageLicense {
  name: string;
  version: string;
  /** The SPDX expression as found, or undefined when the package declares none. */
  license: string | undefined;
}

/** The declared licence of a package.json, including the deprecated object and array forms. */
export function declaredLicense(pkg: Record<string, unknown>): string | undefined {
  const one = (v: unknown): string | undefined => {
    if (typeof v === 'string') return v.trim() || undefined;
    if (v && typeof v === 'object' && typeof (v as { type?: unknown }).type === 'string')
      return (v as { type: string }).type.trim() || undefined;
    return undefined;
  };
  const direct = one(pkg.license);
  if (direct) return direct;
  // The old `licenses: [...]` array listed the licences a package was offered under: a choice.
  if (Array.isArray(pkg.licenses)) {
    const ids = pkg.licenses.map(one).filter((x): x is string => x !== undefined);
    if (ids.length) return ids.length === 1 ? ids[0] : `(${ids.join(' OR ')})`;
  }
  return undefined;
}

type Token = '(' | ')' | 'AND' | 'OR' | 'WITH' | { id: string };

function tokenize(expr: string): Token[] {
  const out: Token[] = [];
  for (const raw of expr.replace(/([()])/g, ' $1 ').split(/\s+/)) {
    if (!raw) continue;
    const upper = raw.toUpperCase();
    if (raw === '(' || raw === ')') out.push(raw);
    else if (upper === 'AND' || upper === 'OR' || upper === 'WITH') out.push(upper);
    else out.push({ id: raw });
  }
  return out;
}

/**
 * Whether an SPDX expression lets us ship the package: OR needs one allowed side, AND needs both.
 * `X WITH exception` counts as X (an exception only grants more). `X+` and `X-or-later` count as X.
 * Anything unparsable is not allowed: a licence we cannot read is a licence we have not checked.
 */
export function isAllowed(expr: string, allowed: ReadonlySet<string> = ALLOWED): boolean {
  const tokens = tokenize(expr);
  // SPDX ids match case-insensitively ("mit" is MIT).
  const allowedLower = new Set([...allowed].map((a) => a.toLowerCase()));
  let pos = 0;
  const fail = (): never => {
    throw new Error('unparsable');
  };
  const atom = (): boolean => {
    const t = tokens[pos++];
    if (t === '(') {
      const v = orExpr();
      if (tokens[pos++] !== ')') fail();
      return v;
    }
    if (t === undefined || typeof t === 'string') return fail();
    const id = t.id.replace(/\+$/, '').replace(/-(only|or-later)$/, '');
    if (tokens[pos] === 'WITH') {
      pos++;
      const exception = tokens[pos++];
      if (exception === undefined || typeof exception === 'string') fail();
    }
    return allowedLower.has(id.toLowerCase());
  };
  const andExpr = (): boolean => {
    let v = atom();
    while (tokens[pos] === 'AND') {
      pos++;
      v = atom() && v;
    }
    return v;
  };
  const orExpr = (): boolean => {
    let v = andExpr();
    while (tokens[pos] === 'OR') {
      pos++;
      v = andExpr() || v;
    }
    return v;
  };
  try {
    const v = orExpr();
    return pos === tokens.length && v;
  } catch {
    return false;
  }
}

function readJson(path: string): Record<string, unknown> {
  return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
}

/** Node's lookup: `name` under the nearest node_modules from `fromDir` up to the filesystem root. */
function resolvePackageDir(fromDir: string, name: string): string | undefined {
  for (let dir = fromDir; ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json'))) return candidate;
    if (dirname(dir) === dir) return undefined;
  }
}

/**
 * Every package reachable from `root`'s production dependencies, once per name@version.
 * Optional dependencies and optional peers that are not installed are skipped (npm did not ship
 * them); a required one that is missing is reported, since the tree we check is then not the one
 * that runs.
 */
export function productionPackages(root: string): { packages: PackageLicense[]; missing: string[] } {
  const seen = new Map<string, PackageLicense>();
  const visitedDirs = new Set<string>();
  const missing: string[] = [];
  const visit = (dir: string, isRoot: boolean) => {
    const real = realpathSync(dir);
    if (visitedDirs.has(real)) return;
    visitedDirs.add(real);
    const pkg = readJson(join(dir, 'package.json'));
    if (!isRoot) {
      const entry = {
        name: String(pkg.name),
        version: String(pkg.version),
        license: declaredLicense(pkg),
      };
      seen.set(`${entry.name}@${entry.version}`, entry);
    }
    const deps = (pkg.dependencies ?? {}) as Record<string, string>;
    const optional = (pkg.optionalDependencies ?? {}) as Record<string, string>;
    const peers = (pkg.peerDependencies ?? {}) as Record<string, string>;
    const peerMeta = (pkg.peerDependenciesMeta ?? {}) as Record<string, { optional?: boolean }>;
    const wanted = new Map<string, boolean>(); // name -> required
    for (const n of Object.keys(deps)) wanted.set(n, !(n in optional));
    for (const n of Object.keys(optional)) wanted.set(n, false);
    // Peers are the host's business for the root; below it npm installs the required ones.
    if (!isRoot)
      for (const n of Object.keys(peers)) if (!wanted.has(n)) wanted.set(n, !peerMeta[n]?.optional);
    for (const [name, required] of wanted) {
      const found = resolvePackageDir(dir, name);
      if (found) visit(found, false);
      else if (required) missing.push(`${name} (needed by ${isRoot ? 'the project' : String(pkg.name)})`);
    }
  };
  visit(root, true);
  const packages = [...seen.values()].sort((a, b) =>
    `${a.name}@${a.version}`.localeCompare(`${b.name}@${b.version}`),
  );
  return { packages, missing: [...new Set(missing)].sort() };
}

export interface LicenseReport {
  /** Licence expression -> how many packages carry it ("(none)" for missing). */
  counts: Map<string, number>;
  problems: string[];
}

/** The verdict on a set of packages: counts for the table, and one problem line per failure. */
export function checkPackages(
  packages: PackageLicense[],
  reviewed: Record<string, string> = REVIEWED,
  allowed: ReadonlySet<string> = ALLOWED,
): LicenseReport {
  const counts = new Map<string, number>();
  const problems: string[] = [];
  const usedReviews = new Set<string>();
  for (const p of packages) {
    const key = p.license ?? '(none)';
    counts.set(key, (counts.get(key) ?? 0) + 1);
    if (p.license !== undefined && isAllowed(p.license, allowed)) continue;
    if (p.name in reviewed) {
      usedReviews.add(p.name);
      continue;
    }
    problems.push(
      p.license === undefined
        ? `${p.name}@${p.version}: no licence declared in its package.json`
        : `${p.name}@${p.version}: licence "${p.license}" is not on the allowlist (scripts/check-licenses.ts)`,
    );
  }
  for (const name of Object.keys(reviewed))
    if (!usedReviews.has(name)) problems.push(`REVIEWED entry is stale (remove it): ${name}`);
  return { counts, problems };
}

/** The counts as an aligned two-column table, most common licence first. */
export function countsTable(counts: Map<string, number>): string {
  const rows = [...counts].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  const width = Math.max('LICENCE'.length, ...rows.map(([l]) => l.length));
  return [`${'LICENCE'.padEnd(width)}  PACKAGES`, ...rows.map(([l, n]) => `${l.padEnd(width)}  ${n}`)].join(
    '\n',
  );
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const repo = resolve(dirname(new URL(import.meta.url).pathname), '..');
  const own = declaredLicense(readJson(join(repo, 'package.json')));
  const { packages, missing } = productionPackages(repo);
  const report = checkPackages(packages);
  const problems = [
    ...(own === 'Apache-2.0' ? [] : [`package.json: license is "${own ?? ''}", expected "Apache-2.0"`]),
    ...missing.map((m) => `not installed: ${m} (run npm ci first)`),
    ...report.problems,
  ];
  console.log(countsTable(report.counts));
  console.log(`\n${packages.length} production packages checked against an Apache-2.0 allowlist`);
  for (const p of problems) console.error(p);
  process.exit(problems.length ? 1 : 0);
}
