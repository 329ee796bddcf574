/**
 * `node bench/hops.ts [--samples n] <build root>...`: where a warm hit's time goes, hop by hop, in
 * each build given (a directory with dist/ and node_modules/, e.g. this checkout and
 * /tmp/kici-bench-09079b4). Every build's server and one idle agent run with bench/hop-marks.mjs
 * preloaded; the hits take turns across builds. Prints, per hop, the median ms after the submit
 * left the client (a hop missing in a build shows as "-").
 */
import { readFile, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { api, startAgent, startServer, stopAll, type Server } from './harness.ts';
import { median } from './stats.ts';

const argv = process.argv.slice(2);
const si = argv.indexOf('--samples');
const samples = si >= 0 ? Number(argv[si + 1]) : 15;
const roots = argv
  .filter((a, i) => !a.startsWith('--') && argv[i - 1] !== '--samples')
  .map((r) => resolve(r));
const trace = join(tmpdir(), `kici-hops-${process.pid}`);
process.env.NODE_OPTIONS = `--import=${join(import.meta.dirname, 'hop-marks.mjs')}`;
process.env.HOP_TRACE = trace;
const wallNow = () => performance.timeOrigin + performance.now();

const byRoot = new Map<string, Map<string, number[]>>(roots.map((r) => [r, new Map()]));
const servers: { root: string; s: Server; marks: string }[] = [];
try {
  for (const [i, root] of roots.entries()) {
    const s = await startServer(root);
    await startAgent(s, 'warm-1', ['linux', 'warm']);
    servers.push({ root, s, marks: join(tmpdir(), `kici-hops-${process.pid}-${i}`) });
  }
  for (let i = 0; i < samples + 2; i++)
    for (const { root, s, marks } of servers) {
      await rm(marks, { force: true });
      await writeFile(trace, '');
      const t0 = wallNow();
      const run = await api<{ jobs: { id: string }[] }>(s, 'POST', '/api/v1/runs', {
        jobs: { hit: { runsOn: ['linux', 'warm'], steps: [{ run: `date +%s%N >> ${marks}` }] } },
      });
      let ns = '';
      while (!(ns = (await readFile(marks, 'utf8').catch(() => '')).trim()))
        await new Promise((r) => setTimeout(r, 2));
      const stepClock = Number(BigInt(ns) / 1000n) / 1000;
      for (;;) {
        const j = await api<{ state: string }>(s, 'GET', `/api/v1/jobs/${run.jobs[0]!.id}`);
        if (j.state === 'succeeded') break;
        await new Promise((r) => setTimeout(r, 10));
      }
      // The first of each hop, up to the step's clock (later ones belong to the job's end).
      const first = new Map<string, number>([['step clock', stepClock - t0]]);
      for (const line of (await readFile(trace, 'utf8')).split('\n').filter(Boolean)) {
        const at = line.lastIndexOf(' ');
        const t = Number(line.slice(at + 1));
        if (t <= stepClock && !first.has(line.slice(0, at))) first.set(line.slice(0, at), t - t0);
      }
      if (i >= 2)
        for (const [k, v] of first) byRoot.get(root)!.set(k, [...(byRoot.get(root)!.get(k) ?? []), v]);
      await new Promise((r) => setTimeout(r, 300));
    }
} finally {
  await stopAll();
  await rm(trace, { force: true });
  for (const x of servers) await rm(x.marks, { force: true });
}
const hops = [...new Set([...byRoot.values()].flatMap((m) => [...m.keys()]))];
const med = (root: string, hop: string) => {
  const v = byRoot.get(root)!.get(hop);
  return v?.length ? median(v) : NaN;
};
hops.sort((a, b) => med(roots[0]!, a) - med(roots[0]!, b) || med(roots.at(-1)!, a) - med(roots.at(-1)!, b));
process.stdout.write(`ms after submit (median of ${samples}), load ${loadavg()[0]!.toFixed(1)}\n`);
process.stdout.write(`${'hop'.padEnd(34)}${roots.map((r) => r.split('/').at(-1)!.padStart(22)).join('')}\n`);
for (const h of hops)
  process.stdout.write(
    `${h.padEnd(34)}${roots.map((r) => (Number.isNaN(med(r, h)) ? '-' : med(r, h).toFixed(2)).padStart(22)).join('')}\n`,
  );
