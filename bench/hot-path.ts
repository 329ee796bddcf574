/**
 * `npm run bench -- hot-path`: the hot-path figures, through bench/cluster-hot-path.ts in a child
 * process (it starts and kills servers and agents of its own). PGlite always; PostgreSQL and three
 * instances when KICI_TEST_DATABASE_URL names a server (the system tier's set-up gives one).
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { BenchResult } from './stats.ts';

const run = promisify(execFile);
const SCRIPT = join(import.meta.dirname, 'cluster-hot-path.ts');

async function part(which: string): Promise<string[]> {
  const { stdout } = await run(process.execPath, [SCRIPT, which], { timeout: 600_000 });
  return stdout.trim().split('\n');
}

function result(name: string, line: string, targetMs?: number, floorMs?: number): BenchResult {
  const cpu = Number(/CPU ([\d.]+) ms\/job/.exec(line)?.[1] ?? NaN);
  return {
    name,
    value: cpu,
    unit: 'ms CPU/job',
    ...(floorMs ? { ratio: cpu / floorMs } : {}),
    target: targetMs !== undefined ? `at most ${targetMs} ms` : 'reported beside PGlite',
    pass: targetMs === undefined ? Number.isFinite(cpu) : cpu <= targetMs,
    detail: line,
  };
}

export async function benchHotPath(): Promise<BenchResult[]> {
  // The ratio is against PGlite's own cost for one job's commit after a wake-up (the floor line).
  const lines = await part('pglite');
  const floorLine = lines.find((l) => l.startsWith('raw floor')) ?? '';
  const floor = Number(/([\d.]+) ms after a/.exec(floorLine)?.[1] ?? NaN);
  const line = lines.at(-1) ?? '';
  const out = [
    result('hot path, PGlite (1,000-job burst, 4 static agents)', `${line}\n    ${floorLine}`, 1, floor),
  ];
  if (process.env.KICI_TEST_DATABASE_URL) {
    out.push(result('hot path, PostgreSQL, one instance', (await part('postgres')).at(-1) ?? ''));
    out.push(result('hot path, PostgreSQL, three instances', (await part('three')).at(-1) ?? ''));
  }
  return out;
}
