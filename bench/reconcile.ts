/**
 * One reconcile plan over 100,000 queued jobs and 1,000 label sets, through the dispatcher's real
 * planning path (queue grouping, routing table, cap simulation, backoff). Also the RSS of a process
 * holding that state, measured in a child so nothing else inflates it.
 */
import { execFileSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { pino } from 'pino';
import { scalerFileSchema } from '../dist/config/index.js';
import { Dispatcher } from '../dist/dispatch/dispatcher.js';
import { ScalerManager } from '../dist/scaler/manager.js';
import { systemClock } from '../dist/util/clock.js';
import { fmt, median, type BenchResult } from './stats.ts';

const SCALERS = 100;
const SETS_PER_SCALER = 10;
const JOBS = 100_000;

export function buildState() {
  const scalers = [];
  for (let s = 0; s < SCALERS; s++) {
    const labelSets = [];
    for (let l = 0; l < SETS_PER_SCALER; l++)
      labelSets.push({ labels: ['linux', `pool-${s}`, `size-${l}`], binaryPath: '/bin/true' });
    scalers.push({ name: `s${s}`, type: 'bare-metal', maxAgents: 20, labelSets });
  }
  const config = scalerFileSchema.parse({ version: 1, globalMaxAgents: 500, scalers });
  const backends = config.scalers.map((e) => ({
    name: e.name,
    type: 'bare-metal' as const,
    capabilities: {
      localCompute: true,
      lifetime: 'orchestrator' as const,
      cleansOrphans: false,
      capturesLogs: false,
    },
    getActiveCount: () => 0,
    getRequiredTools: () => [],
    spawn: () => Promise.reject(new Error('not in a benchmark')),
    destroy: async () => {},
    checkReload: () => ({ valid: true as const }),
    applyReload: () => {},
    shutdownAll: async () => {},
  }));
  const logger = pino({ level: 'silent' });
  const store = {} as never; // planning never touches the store
  const scaler = new ScalerManager({
    config,
    backends,
    store,
    clock: systemClock,
    logger,
    instanceId: 'bench',
    orchestratorUrlFor: () => 'ws://x',
  });
  const dispatcher = new Dispatcher({ store, clock: systemClock, logger, scaler });
  for (let i = 0; i < JOBS; i++) {
    // 2,000 distinct label combinations; one in ten matches no label set.
    const s = i % SCALERS;
    const l = Math.floor(i / SCALERS) % SETS_PER_SCALER;
    const runsOn = i % 10 === 9 ? ['linux', `pool-${s}`, 'gpu'] : ['linux', `pool-${s}`, `size-${l}`];
    dispatcher.queue.add({
      id: `j-${i}`,
      runId: 'r',
      name: `n${i}`,
      seq: i,
      runsOn: runsOn.sort(),
      spec: { runsOn, steps: [{ run: 'true' }], role: 'execution' },
      createdAtMs: 0,
    });
  }
  return { dispatcher, scaler };
}

export async function benchReconcile(): Promise<BenchResult> {
  const { dispatcher } = buildState();
  const times: number[] = [];
  let spawns = 0;
  for (let r = 0; r < 15; r++) {
    const t0 = performance.now();
    const { plan } = dispatcher.plan();
    times.push(performance.now() - t0);
    spawns = plan.reduce((n, d) => n + d.spawn.length, 0);
  }
  const rss = JSON.parse(
    execFileSync(process.execPath, ['--expose-gc', import.meta.filename, '--rss'], { encoding: 'utf8' })
      .trim()
      .split('\n')
      .at(-1)!,
  ) as { baseline: number; loaded: number };
  const ms = median(times);
  const mb = rss.loaded / 1048576;
  return {
    name: 'reconcile plan: 100,000 queued jobs × 1,000 label sets',
    value: ms,
    unit: 'ms',
    target: 'under 50 ms; RSS under 200 MB',
    pass: ms < 50 && mb < 200,
    detail: `median ${fmt(ms)} ms over ${times.length} plans (min ${fmt(Math.min(...times))}), ${spawns} spawns planned (capped by globalMaxAgents 500); RSS holding the state ${fmt(mb)} MB (bare process ${fmt(rss.baseline / 1048576)} MB)`,
  };
}

if (process.argv.includes('--rss')) {
  const baseline = process.memoryUsage().rss;
  const state = buildState();
  state.dispatcher.plan();
  globalThis.gc?.();
  console.log(
    JSON.stringify({ baseline, loaded: process.memoryUsage().rss, queued: state.dispatcher.queue.size }),
  );
} else if (import.meta.url === pathToFileURL(process.argv[1]!).href) {
  console.log(JSON.stringify(await benchReconcile(), null, 2));
}
