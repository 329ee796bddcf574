import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import type { RunSpec } from '../jobs/run-spec.js';
import { Orchestrator } from '../server/orchestrator.js';
import type { JobRow } from '../store/index.js';
import { TERMINAL_JOB_STATES } from '../store/index.js';

export interface DemoOptions {
  jobs?: number;
  dataDir?: string;
  config?: string;
  keep?: boolean;
}

export function demoRun(jobs: number): RunSpec {
  const spec: RunSpec = { name: 'demo', jobs: {} };
  for (let i = 1; i <= jobs; i++) {
    const large = i % 2 === 0;
    spec.jobs[`${large ? 'large' : 'small'}-${String(i).padStart(2, '0')}`] = {
      runsOn: ['linux', large ? 'large' : 'small'],
      role: 'execution',
      env: { DEMO_JOB: String(i) },
      steps: [
        { name: 'hello', run: 'echo "job $DEMO_JOB on $(hostname) as agent $KICI_JOB_ID"' },
        {
          name: 'work',
          run: `i=0; while [ $i -lt ${3 + (i % 5)} ]; do i=$((i+1)); echo "step $i"; sleep 0.1; done`,
        },
      ],
    };
  }
  return spec;
}

function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/**
 * `npm run demo`: a real orchestrator on embedded defaults, a burst of jobs over two label sets,
 * live progress, a summary, and a clean stop (also on Ctrl-C).
 */
export async function demo(o: DemoOptions): Promise<number> {
  const total = o.jobs ?? 24;
  const dataDir = o.dataDir ?? (await mkdtemp(join(tmpdir(), 'kici-demo-')));
  const config = o.config ?? fileURLToPath(new URL('../../examples/demo-scalers.yaml', import.meta.url));
  // A temporary data dir is removed at the end; the log the summary names is kept beside it.
  const logPath = o.dataDir ? join(dataDir, 'orchestrator.log') : `${dataDir}.log`;
  const logger = pino({ level: 'info', base: { service: 'kici-orchestrator' } }, createWriteStream(logPath));
  const out = (s: string) => process.stdout.write(s);
  out(`kici demo: starting an orchestrator (embedded database in ${dataDir}, config ${config})\n`);
  // The demo's admin token sits beside its data dir (never inside it) and goes away with it.
  const adminTokenFile = `${dataDir}.admin-token`;
  const orch = await Orchestrator.start({
    port: 0,
    dataDir,
    adminTokenFile,
    scalerConfigPath: config,
    logger,
  });
  out(`orchestrator listening on ${orch.url} (agents dial ${orch.wsUrl})\n`);
  let interrupted = false;
  const onSignal = () => {
    interrupted = true;
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const { runId, jobs } = await orch.dispatcher.submit(demoRun(total));
    out(`submitted run ${runId} with ${jobs.length} jobs on labels [linux,small] and [linux,large]\n`);
    const spawned = new Set<string>();
    const tty = process.stdout.isTTY;
    let lastLine = '';
    let rows: JobRow[] = [];
    while (!interrupted) {
      for (const e of orch.scaler?.entries() ?? []) spawned.add(e.agentId);
      rows = await orch.store.jobs.list({ runId, limit: 10_000 });
      const count = (s: string[]) => rows.filter((r) => s.includes(r.state)).length;
      const done = count([...TERMINAL_JOB_STATES]);
      const line =
        `queued ${count(['queued'])}  running ${count(['dispatched', 'running'])}  done ${done}/${total}  ` +
        `agents alive ${orch.scaler?.entries().length ?? 0}  spawned ${spawned.size}`;
      if (tty) out(`\r${line}\x1b[K`);
      else if (line !== lastLine) out(`${line}\n`);
      lastLine = line;
      if (done === total) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    if (tty) out('\n');
    if (interrupted) {
      out('interrupted: stopping the orchestrator and its agents…\n');
      return 130;
    }
    const latencies = rows
      .filter((r) => r.started_at)
      .map((r) => r.started_at!.getTime() - r.created_at.getTime())
      .sort((a, b) => a - b);
    const ok = rows.filter((r) => r.state === 'succeeded').length;
    const failed = rows.length - ok;
    out(
      `\nsummary\n` +
        `  jobs succeeded         ${ok}\n` +
        `  jobs not succeeded     ${failed}\n` +
        `  agents spawned         ${spawned.size}\n` +
        `  submit-to-start p50    ${percentile(latencies, 50)} ms\n` +
        `  submit-to-start p95    ${percentile(latencies, 95)} ms\n` +
        `  orchestrator log       ${logPath}\n`,
    );
    for (const r of rows.filter((x) => x.state !== 'succeeded'))
      out(`  ${r.name}: ${r.state} ${r.reason ?? ''}\n`);
    return failed === 0 ? 0 : 1;
  } finally {
    // Unlike `serve`, the demo owns its agents: Ctrl-C tears every one of them down.
    await orch.stop({ agents: 'teardown' });
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    const left = orch.scaler?.entries().length ?? 0;
    out(`stopped; agents left running: ${left}\n`);
    if (!o.keep && !o.dataDir) {
      await rm(dataDir, { recursive: true, force: true });
      await rm(adminTokenFile, { force: true });
    }
  }
}
