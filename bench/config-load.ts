/**
 * Benchmark: load and validate a large scaler config (200 scalers, 2,000 label sets,
 * spread over scalers.yaml and two scalers.d/ files), plus the cross-scaler checks.
 * Runs against the built output; build first (npm run build).
 *
 *   node bench/config-load.ts
 */
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

import type * as configApi from '../src/config/index.ts';

// Typed from the sources, loaded from the build (dist may not exist when type-checking).
type ConfigModule = typeof configApi;

const SCALERS = 200;
const LABEL_SETS_PER_SCALER = 10;
const RUNS = 20;
const TYPES = ['container', 'bare-metal', 'firecracker', 'event'] as const;

async function loadBuiltConfigModule(): Promise<ConfigModule> {
  const url = new URL('../dist/config/index.js', import.meta.url).href;
  try {
    return (await import(url)) as ConfigModule;
  } catch (err) {
    throw new Error(`cannot load ${url}; run "npm run build" first`, { cause: err });
  }
}

function scalerYaml(i: number): string {
  const type = TYPES[i % TYPES.length]!;
  const lines = [`  - name: pool-${i}`, `    type: ${type}`, `    maxAgents: ${1 + (i % 16)}`];
  if (type === 'firecracker') {
    lines.push(
      '    firecrackerPath: /usr/bin/firecracker',
      '    jailerPath: /usr/bin/jailer',
      '    kernelPath: /k',
      '    uid: 1000',
      '    gid: 1000',
    );
  }
  if (type === 'event') lines.push('    provisioningTargets: ["job:provision.yaml"]');
  if (i % 5 === 0)
    lines.push('    resourceCap: { maxCpu: 16, maxMemory: 32g }', '    warmPool: { enabled: true, size: 1 }');
  lines.push('    labelSets:');
  for (let j = 0; j < LABEL_SETS_PER_SCALER; j++) {
    lines.push(`      - labels: [linux, pool-${i}, set-${j}]`);
    if (type === 'container') lines.push('        image: ghcr.io/kici-dev/agent:latest');
    if (type === 'bare-metal') lines.push('        binaryPath: /usr/local/bin/kici-agent');
    if (type === 'firecracker') lines.push('        rootfsPath: /rootfs.ext4');
    if (j % 4 === 0)
      lines.push(`        resources: { limits: { cpus: ${1 + (j % 3)}, memory: ${1 + (j % 3)}g } }`);
    if (j % 10 === 0) lines.push('        networkPolicy: { allowlist: ["10.20.0.0/16"] }');
  }
  return lines.join('\n');
}

function scalersYaml(from: number, to: number): string {
  const items: string[] = [];
  for (let i = from; i < to; i++) items.push(scalerYaml(i));
  return items.join('\n');
}

async function writeConfig(dir: string): Promise<{ main: string; dropIns: string }> {
  const main = join(dir, 'scalers.yaml');
  const dropIns = join(dir, 'scalers.d');
  await mkdir(dropIns);
  const half = SCALERS / 2;
  const quarter = SCALERS / 4;
  const head = 'version: 1\nglobalMaxAgents: 500\nglobalResourceCap: { maxCpu: 512, maxMemory: 1024g }\n';
  await writeFile(main, `${head}scalers:\n${scalersYaml(0, half)}\n`);
  await writeFile(join(dropIns, '10-a.yaml'), `scalers:\n${scalersYaml(half, half + quarter)}\n`);
  await writeFile(join(dropIns, '20-b.yaml'), `scalers:\n${scalersYaml(half + quarter, SCALERS)}\n`);
  return { main, dropIns };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export async function benchConfigLoad(): Promise<{ name: string; medianMs: number; detail: string }> {
  const config = await loadBuiltConfigModule();
  const dir = await mkdtemp(join(tmpdir(), 'kici-bench-config-'));
  try {
    const { main, dropIns } = await writeConfig(dir);
    const once = async (): Promise<number> => {
      const loaded = await config.loadScalerConfig(main, dropIns);
      const overlaps = config.detectLabelSetOverlaps(loaded.scalers);
      const duplicates = config.findDuplicateScalerNames(loaded.scalers);
      const labelSets = loaded.scalers.reduce((n, s) => n + s.labelSets.length, 0);
      if (loaded.scalers.length !== SCALERS || labelSets !== SCALERS * LABEL_SETS_PER_SCALER) {
        throw new Error(`benchmark config loaded ${loaded.scalers.length} scalers / ${labelSets} label sets`);
      }
      if (overlaps.length > 0 || duplicates.length > 0) throw new Error('benchmark config has overlaps');
      return labelSets;
    };
    await once(); // warm-up: module init, JIT
    const times: number[] = [];
    // CPU time too: on a busy machine wall time includes waiting for a core.
    const cpuTimes: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const cpu = process.cpuUsage();
      const start = performance.now();
      await once();
      times.push(performance.now() - start);
      const used = process.cpuUsage(cpu);
      cpuTimes.push((used.user + used.system) / 1000);
    }
    // Where the time goes: reading + YAML parsing vs schema validation + cross-scaler checks.
    const readTimes: number[] = [];
    const validateTimes: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t0 = performance.now();
      const sources = await config.readConfigSources(main, dropIns);
      const t1 = performance.now();
      const parsed = config.scalerFileSchema.parse(sources.merged, config.SCALER_PARSE_PARAMS);
      config.detectLabelSetOverlaps(parsed.scalers);
      config.findDuplicateScalerNames(parsed.scalers);
      readTimes.push(t1 - t0);
      validateTimes.push(performance.now() - t1);
    }
    const medianMs = median(times);
    const ms = (n: number): string => `${n.toFixed(1)} ms`;
    return {
      name: 'config-load',
      medianMs,
      detail:
        `${SCALERS} scalers, ${SCALERS * LABEL_SETS_PER_SCALER} label sets (main + 2 scalers.d files), ` +
        `loadScalerConfig + overlap/duplicate checks, ${RUNS} runs: median ${ms(medianMs)}, ` +
        `min ${ms(Math.min(...times))}, max ${ms(Math.max(...times))}, median CPU time ${ms(median(cpuTimes))}; ` +
        `of which read+YAML ${ms(median(readTimes))}, schema+checks ${ms(median(validateTimes))} (target < 100 ms)`,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const result = await benchConfigLoad();
  console.log(`${result.name}: ${result.medianMs.toFixed(1)} ms median — ${result.detail}`);
}
