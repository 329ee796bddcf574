/**
 * Top self-time functions of a V8 `.cpuprofile` (as written by `node --cpu-prof`, e.g. through the
 * hot-path bench's KICI_BENCH_PROFILE): `node bench/cpu-profile-top.ts <file.cpuprofile> [n]`.
 * Prints the heaviest functions and the heaviest files/packages, so a hot path is found by where
 * its CPU goes rather than by guessing.
 */
import { readFile } from 'node:fs/promises';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const [file, nArg, skipArg] = process.argv.slice(2);
if (!file) {
  console.error('usage: node bench/cpu-profile-top.ts <file.cpuprofile> [n] [skip-ms]');
  process.exit(2);
}
const n = Number(nArg ?? 30);
const prof = JSON.parse(await readFile(file, 'utf8')) as Profile;
const byId = new Map(prof.nodes.map((node) => [node.id, node]));

// Self time of a node = the sampling intervals that landed in it (timeDeltas are µs). skip-ms
// leaves out the profile's start (module loading, database start) to look at a steady state.
const skipUs = Number(skipArg ?? 0) * 1000;
const selfUs = new Map<number, number>();
let totalUs = 0;
let atUs = 0;
for (let i = 0; i < prof.samples.length; i++) {
  const dt = prof.timeDeltas[i + 1] ?? 0;
  atUs += prof.timeDeltas[i] ?? 0;
  if (atUs < skipUs) continue;
  selfUs.set(prof.samples[i]!, (selfUs.get(prof.samples[i]!) ?? 0) + dt);
  totalUs += dt;
}

/** node_modules/<pkg> (or the file under dist/, or a V8 pseudo-frame like "(garbage collector)"). */
function place(url: string, fn: string): string {
  if (!url) return fn.startsWith('(') ? fn : '(native)';
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (m) return m[1]!;
  const d = /\/(dist\/.*)$/.exec(url);
  return d ? d[1]! : url.replace(/^file:\/\//, '');
}

const fns = new Map<string, number>();
const places = new Map<string, number>();
for (const [id, us] of selfUs) {
  const { functionName, url, lineNumber } = byId.get(id)!.callFrame;
  const where = place(url, functionName);
  const key = `${functionName || '(anonymous)'}  ${where}${url ? `:${lineNumber + 1}` : ''}`;
  fns.set(key, (fns.get(key) ?? 0) + us);
  places.set(where, (places.get(where) ?? 0) + us);
}

// Inclusive time per package / file: a sample counts once for every place on its stack, so
// "how much CPU is spent under pglite" includes the wasm and fs calls it makes.
const parent = new Map<number, number>();
for (const node of prof.nodes) for (const c of node.children ?? []) parent.set(c, node.id);
const inclusive = new Map<string, number>();
for (const [id, us] of selfUs) {
  const seen = new Set<string>();
  for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
    const { functionName, url } = byId.get(at)!.callFrame;
    if (!url) continue;
    const where = place(url, functionName);
    if (seen.has(where)) continue;
    seen.add(where);
    inclusive.set(where, (inclusive.get(where) ?? 0) + us);
  }
}

const show = (title: string, m: Map<string, number>) => {
  console.log(`\n${title}`);
  for (const [k, us] of [...m].sort((a, b) => b[1] - a[1]).slice(0, n))
    console.log(
      `${(us / 1000).toFixed(0).padStart(8)} ms ${((100 * us) / totalUs).toFixed(1).padStart(5)}%  ${k}`,
    );
};
console.log(`total sampled: ${(totalUs / 1000).toFixed(0)} ms`);
show('self time by function', fns);
show('self time by package / file', places);
show('inclusive time by package / file (a sample counts once per place on its stack)', inclusive);
