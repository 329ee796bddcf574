import { readFile, writeFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { loadScalerConfigForPeople, type ScalerConfig } from '../../config/index.js';
import { renderChart } from '../../scaler/sim/chart.js';
import { renderComparison, runSimulation, type RunOptions } from '../../scaler/sim/report.js';
import { spawnLatencyFromMetrics } from '../../scaler/sim/spawn-latency.js';
import { parseTraceFile, TraceError } from '../../scaler/sim/trace.js';
import { parseDurationMs } from '../../util/duration.js';
import { errorMessage, UsageError, UserError } from '../../util/errors.js';
import { printJson } from '../output.js';
import type { AdminClient } from './client.js';

type Client = (c: Command) => Promise<AdminClient>;

/** `job export-trace`: the job history as JSONL, the input of `scaler simulate`. */
export function registerExportTraceCommand(job: Command, client: Client): void {
  job
    .command('export-trace')
    .description('write the job history as a JSONL trace (one job per line) for `scaler simulate`')
    .option('--since <duration>', 'how far back, e.g. 12h, 7d', '7d')
    .option('--out <file>', 'write to this file instead of stdout')
    .action(async (o: { since: string; out?: string }, cmd: Command) => {
      if (parseDurationMs(o.since) === undefined)
        throw new UsageError(`--since: "${o.since}" is not a duration; use e.g. 90m, 12h, 7d`);
      const body = await (
        await client(cmd)
      ).download(`/api/v1/trace/jobs?since=${encodeURIComponent(o.since)}`);
      if (o.out) {
        await writeFile(o.out, body);
        const n = body.toString('utf8').split('\n').filter(Boolean).length;
        process.stderr.write(`${n} line(s) (jobs and latency samples) written to ${o.out}\n`);
      } else process.stdout.write(body);
    });
}

const collect = (v: string, prev: string[]) => [...prev, v];

/** `label=number` pairs from repeated flags, with the flag named in any error. */
function pairs(flag: string, items: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const item of items) {
    for (const part of item.split(',')) {
      const m = /^(.+)=([0-9]+(?:\.[0-9]+)?)$/.exec(part.trim());
      if (!m) throw new UsageError(`${flag}: "${part}" is not name=number (e.g. ${flag} container=1200)`);
      out[m[1]!] = Number(m[2]);
    }
  }
  return out;
}

async function loadConfig(path: string): Promise<ScalerConfig> {
  const loaded = await loadScalerConfigForPeople(path);
  if (!loaded.ok) throw new UserError(`${path}: invalid scaler config`, loaded.problems);
  return loaded.config;
}

interface SimulateFlags {
  config: string;
  against?: string;
  trace: string;
  json?: boolean;
  svg?: string;
  cost: string[];
  spawnMs: string[];
  measuredSpawn?: boolean;
  agentIdleMs?: string;
  releaseMs?: string;
  dispatchMs?: string;
}

/** A flag of milliseconds, or undefined when it was not given (the trace's samples then apply). */
function msFlag(flag: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new UsageError(`${flag}: "${v}" is not a number of ms`);
  return n;
}

export function registerSimulateCommand(scaler: Command, client: Client): void {
  scaler
    .command('simulate')
    .description('replay a job trace against a scaler config (and another to compare) on a virtual clock')
    .requiredOption('--config <file>', 'the proposed scaler config')
    .option('--against <file>', 'the current scaler config, shown side by side with the difference')
    .requiredOption('--trace <file>', 'JSONL trace (from `job export-trace`, or written by hand)')
    .option(
      '--spawn-ms <type=ms>',
      "spawn time per backend type or scaler name (repeatable; wins over the trace's spawn samples)",
      collect,
      [],
    )
    .option(
      '--measured-spawn',
      'take spawn times the server measured (its spawn-latency metric) where the trace has no samples',
    )
    .option('--cost <labelSet=perHour>', 'cost per agent-hour per label set (repeatable)', collect, [])
    .option('--agent-idle-ms <ms>', 'how long an agent that found no job waits before it leaves', '5000')
    .option(
      '--release-ms <ms>',
      "from a job ending until its agent is gone and its capacity free (default: the trace's samples, else 0)",
    )
    .option(
      '--dispatch-ms <ms>',
      "from an agent being free for a job until the job starts on it (default: the trace's mean, else 0)",
    )
    .option('--svg <file>', 'write a chart of queue wait and agents over time')
    .option('--json', 'machine-readable output')
    .action(async (o: SimulateFlags, cmd: Command) => {
      const spawnMs = pairs('--spawn-ms', o.spawnMs);
      let defaultSpawnMs: Record<string, number> | undefined;
      if (o.measuredSpawn) {
        const metrics = (await (await client(cmd)).download('/metrics')).toString('utf8');
        defaultSpawnMs = spawnLatencyFromMetrics(metrics);
      }
      const idle = Number(o.agentIdleMs);
      if (!Number.isFinite(idle) || idle < 0)
        throw new UsageError(`--agent-idle-ms: "${o.agentIdleMs}" is not a number of ms`);
      let text: string;
      try {
        text = await readFile(o.trace, 'utf8');
      } catch (err) {
        throw new UserError(`--trace ${o.trace}: cannot read it (${errorMessage(err)})`);
      }
      let trace;
      try {
        trace = parseTraceFile(text, o.trace);
      } catch (err) {
        if (err instanceof TraceError) throw new UserError(err.message);
        throw err;
      }
      const release = msFlag('--release-ms', o.releaseMs);
      const dispatch = msFlag('--dispatch-ms', o.dispatchMs);
      const opts: RunOptions = { spawnMs, agentIdleMs: idle, samples: trace.samples };
      if (defaultSpawnMs) opts.defaultSpawnMs = defaultSpawnMs;
      if (release !== undefined) opts.releaseMs = release;
      if (dispatch !== undefined) opts.dispatchMs = dispatch;
      if (o.cost.length) opts.cost = pairs('--cost', o.cost);
      const run = async (path: string) => {
        try {
          return runSimulation(await loadConfig(path), trace.jobs, opts);
        } catch (err) {
          if (err instanceof UserError) throw err;
          throw new UserError(`${path}: ${errorMessage(err)}`);
        }
      };
      const proposed = await run(o.config);
      const current = o.against ? await run(o.against) : undefined;
      if (o.svg) await writeFile(o.svg, renderChart(proposed, current));
      if (o.json) return printJson(current ? { proposed, current } : { proposed });
      process.stdout.write(renderComparison(proposed, current) + '\n');
    });
}
