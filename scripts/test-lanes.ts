/**
 * `npm test`: the unit and end-to-end tiers as two vitest processes that run at the same time.
 *
 * - The main lane: the unit projects and the parallel end-to-end files, two workers.
 * - The serial lane: the end-to-end files that restart servers, install the tarball or fuzz, one
 *   file at a time. Each scopes what it checks to its own processes, so it needs no quiet host,
 *   only no other file of its own lane beside it; it mostly waits on child processes, so it fits
 *   beside the main lane on a 2-core host instead of adding its whole length after it.
 *
 * vitest runs its project groups one after the other, so two lanes need two processes. The main
 * lane prints as it goes; the serial lane's output is kept and printed whole when both are done,
 * so the log reads as two blocks. Arguments are given to both lanes (a file filter selects within
 * each). KICI_TEST_REPORT_DIR=<dir> adds a JSON report per lane there (`.ci/run` reads them).
 * Both lanes start from one migrated database made here (test-template.ts), not one each.
 * The exit code is the first failing lane's.
 */
import { spawn } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { makeTestTemplate, TEMPLATE_ENV } from './test-template.ts';

const ROOT = join(import.meta.dirname, '..');
const VITEST = join(ROOT, 'node_modules/vitest/vitest.mjs');
const args = process.argv.slice(2);
const filtered = args.some((a) => !a.startsWith('-'));
const reportDir = process.env.KICI_TEST_REPORT_DIR;

const lanes = [
  { name: 'main', projects: ['unit-pure', 'unit', 'e2e'], live: true },
  { name: 'serial', projects: ['e2e-serial'], live: false },
];

function vitestArgs(lane: (typeof lanes)[number]): string[] {
  return [
    VITEST,
    'run',
    ...lane.projects.flatMap((p) => ['--project', p]),
    // A filter may match files of one lane only: the other lane then has nothing to do.
    ...(filtered ? ['--passWithNoTests'] : []),
    ...(reportDir
      ? ['--reporter=default', '--reporter=json', `--outputFile.json=${join(reportDir, `${lane.name}.json`)}`]
      : []),
    ...args,
  ];
}

// Named by a caller (a run that makes one for more than these lanes) or made here for both.
const madeTemplate = process.env[TEMPLATE_ENV]
  ? undefined
  : await makeTestTemplate((await import('../dist/store/open.js')).openDatabase);
const env = madeTemplate ? { ...process.env, [TEMPLATE_ENV]: madeTemplate } : process.env;

const children = new Set<ReturnType<typeof spawn>>();
for (const sig of ['SIGINT', 'SIGTERM'] as const)
  process.on(sig, () => {
    for (const c of children) if (c.pid) process.kill(c.pid, sig);
  });

const runs = lanes.map(async (lane) => {
  const kept: Buffer[] = [];
  const child = spawn(process.execPath, vitestArgs(lane), {
    cwd: ROOT,
    env,
    stdio: lane.live ? 'inherit' : ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  child.stdout?.on('data', (d: Buffer) => kept.push(d));
  child.stderr?.on('data', (d: Buffer) => kept.push(d));
  // 'close' comes after the child's output has all been read.
  const code = await new Promise<number>((res) => child.on('close', (c) => res(c ?? 1)));
  children.delete(child);
  return { lane, code, output: Buffer.concat(kept) };
});

const results = await Promise.all(runs);
if (madeTemplate) await rm(madeTemplate, { recursive: true, force: true });
for (const r of results.filter((x) => !x.lane.live)) {
  process.stdout.write(`\n==== ${r.lane.name} lane (${r.lane.projects.join(', ')}) ====\n`);
  process.stdout.write(r.output);
}
const failed = results.find((r) => r.code !== 0);
if (failed) process.stdout.write(`\n${failed.lane.name} lane failed (exit ${failed.code})\n`);
process.exitCode = failed?.code ?? 0;
