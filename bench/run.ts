/**
 * `npm run bench`: every benchmark, each reported beside the raw cost it is judged against.
 * Results are also written to .bench-out/results.json.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { benchColdStart } from './cold-start.ts';
import { benchConfigLoad } from './config-load.ts';
import { benchContainerStart } from './container-start.ts';
import { benchHotPath } from './hot-path.ts';
import { benchLatency } from './latency.ts';
import { benchLogs } from './logs.ts';
import { benchReconcile } from './reconcile.ts';
import { benchSoak } from './soak.ts';
import { benchScale } from './scale.ts';
import { benchSimulate } from './simulate.ts';
import { benchVmStart } from './vm-start.ts';
import type { BenchResult } from './stats.ts';

// Names select benches; `--flag value` pairs are read by the benches themselves (latency, scale).
const args = process.argv.slice(2);
const only = args.filter((a, i) => !a.startsWith('--') && !args[i - 1]?.startsWith('--'));
type Out = BenchResult | { name: string; medianMs: number; detail: string };
const benches: [string, () => Promise<Out | Out[]>][] = [
  ['config-load', benchConfigLoad],
  ['cold-start', () => benchColdStart(50)],
  ['reconcile', benchReconcile],
  // The what-if simulator: a synthetic year (~2M jobs) on a virtual clock, in under 60 s.
  ['sim', benchSimulate],
  // A 1,000-job burst through a real server and 4 real agents (PostgreSQL too when one is named).
  ['hot-path', benchHotPath],
  // Job output: lines per second into the store, bytes per million lines.
  ['logs', () => benchLogs()],
  // Skipped (with the reason printed) unless DOCKER_HOST names an engine socket.
  ['container', () => benchContainerStart(20)],
];
// Needs root, a namespace of its own and the guest: only when the guest is named (see vm-start.ts).
if (process.env.KICI_TEST_VM_KERNEL) benches.push(['vm-start', () => benchVmStart(3)]);
// Long (50,000 jobs by default; --jobs N, --every N): only when named.
if (only.includes('soak')) benches.push(['soak', benchSoak]);
if (only.includes('latency')) benches.push(['latency', benchLatency]);
if (only.includes('scale')) benches.push(['scale', benchScale]);

const results: BenchResult[] = [];
for (const [key, run] of benches) {
  if (only.length && !only.includes(key)) continue;
  process.stdout.write(`running ${key}…\n`);
  for (const r of [await run()].flat()) report(r);
}

function report(r: Out): void {
  const norm: BenchResult =
    'value' in r
      ? r
      : {
          name: r.name,
          value: r.medianMs,
          unit: 'ms',
          target: 'under 100 ms',
          pass: r.medianMs < 100,
          detail: r.detail,
        };
  results.push(norm);
  process.stdout.write(
    `  ${Number.isNaN(norm.value) ? 'SKIP' : norm.pass ? 'PASS' : 'MISS'}  ${norm.name}: ${norm.value.toFixed(1)} ${norm.unit}` +
      `${norm.ratio !== undefined ? ` (ratio ${norm.ratio.toFixed(2)})` : ''}; target ${norm.target}\n    ${norm.detail}\n`,
  );
}
await mkdir('.bench-out', { recursive: true });
await writeFile('.bench-out/results.json', JSON.stringify(results, null, 2));
