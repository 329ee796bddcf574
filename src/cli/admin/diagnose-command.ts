import type { Command } from 'commander';
import { printJson } from '../output.js';
import type { AdminClient } from './client.js';
import { instanceCell, manyInstances, warnIfPartial, type InstanceMarked } from './instance-column.js';
import type { DatabaseView } from '../../server/retention.js';

interface Diagnosis {
  configured: boolean;
  peersUnavailable?: string;
  database?: DatabaseView;
  healthy: boolean;
  scalers: (InstanceMarked & {
    name: string;
    type: string;
    healthy: boolean;
    failures: { kind: string; count: number; lastMessage: string; lastAt: string; fix: string }[];
    backoff: {
      labelSet: string;
      consecutiveFailures: number;
      active: boolean;
      liftsAt: string | null;
      lastError: { kind: string; message: string } | null;
    }[];
    caps: {
      active: number;
      maxAgents: number;
      reserved: number;
      usage: { cpus: number; memBytes: number };
      resourceCap: { maxCpu?: number; maxMemoryBytes?: number } | null;
    };
    warmPool: { pools: { labelSet: string; target: number; ready: number; inFlight: number }[] } | null;
    missingTools: { tool: string; problem: string; severity: string; fix: string }[];
    findings: { problem: string; fix: string }[];
    /** Unconfined label sets (trust: host) and what a job there can do. */
    risks?: string[];
  })[];
  /** PASS / WARN / FAIL per scaler, on the spawn failures of the last five minutes; WARN for a dead instance. */
  checks?: (InstanceMarked & { name: string; status: 'PASS' | 'WARN' | 'FAIL'; message: string })[];
}

const mib = (b: number) => `${Math.round(b / 1048576)}Mi`;

/** The human report: one block per scaler, headed `scaler:<name>` as the backoff message says. */
function render(d: Diagnosis): string {
  const db = d.database ? renderDatabase(d.database) : '';
  // Rows of several instances name theirs; one instance's report reads as it always did.
  const many = manyInstances([...d.scalers, ...(d.checks ?? [])]);
  const on = (r: InstanceMarked) => (many ? ` on ${instanceCell(r)}` : '');
  const rows = (d.checks ?? []).map((c) => `${c.status.padEnd(4)}  ${c.name}${on(c)}  ${c.message}`);
  if (!d.configured) return `${db}${[...rows, 'no scaler is configured', ''].join('\n')}`;
  const out: string[] = [...(db ? [db.trimEnd()] : []), ...rows];
  for (const s of d.scalers) {
    out.push(`scaler:${s.name} (${s.type})${on(s)}: ${s.healthy ? 'ok' : 'PROBLEM'}`);
    const cap = s.caps.resourceCap;
    out.push(
      `  caps: ${s.caps.active}/${s.caps.maxAgents} agents, ${s.caps.reserved} reserved, ${s.caps.usage.cpus} cpu, ${mib(s.caps.usage.memBytes)}` +
        (cap ? ` (cap ${cap.maxCpu ?? '∞'} cpu, ${cap.maxMemoryBytes ? mib(cap.maxMemoryBytes) : '∞'})` : ''),
    );
    out.push(
      `  warm pool: ${
        s.warmPool
          ? s.warmPool.pools
              .map((p) => `[${p.labelSet}] ${p.ready}/${p.target} ready, ${p.inFlight} starting`)
              .join('; ') || 'none'
          : 'off'
      }`,
    );
    for (const f of s.failures)
      out.push(`  spawn failures: ${f.kind} x${f.count}, last at ${f.lastAt}: ${f.lastMessage}`);
    for (const b of s.backoff.filter((x) => x.consecutiveFailures > 0))
      out.push(
        `  backoff: [${b.labelSet}] ${b.consecutiveFailures} consecutive failure(s); ${b.liftsAt ? `lifts at ${b.liftsAt}` : 'retrying now'}`,
      );
    for (const t of s.missingTools)
      out.push(
        `  missing tool: ${t.tool}: ${t.problem} (${t.severity === 'fatal' ? 'start-up fails' : 'spawns fail'})`,
      );
    for (const r of s.risks ?? []) out.push(`  risk: ${r}`);
    for (const f of s.findings) {
      out.push(`  problem: ${f.problem}`);
      out.push(`    fix: ${f.fix}`);
    }
  }
  out.push(d.healthy ? 'healthy' : 'problems found');
  return out.join('\n') + '\n';
}

/** The database line: size, engine, retention settings and what the last prune removed. */
function renderDatabase(v: DatabaseView): string {
  const size = v.bytes === null ? 'size unknown' : mib(v.bytes);
  const keep = Object.entries(v.retention)
    .map(([k, val]) => `${k} ${val}`)
    .join(', ');
  const last = v.lastPrune ? `last prune ${v.lastPrune.at}: ${v.lastPrune.total} row(s)` : 'no prune yet';
  return `database (${v.engine}): ${size}\n  retention: ${keep}\n  ${last}\n`;
}

export function registerDiagnoseCommand(
  program: Command,
  client: (c: Command) => Promise<AdminClient>,
): void {
  program
    .command('diagnose')
    .description(
      'per scaler: recent spawn failures, backoff, caps, warm pool, missing tools, and the fix for each',
    )
    .option('--json', 'machine-readable output')
    .action(async (o: { json?: boolean }, cmd: Command) => {
      const d = await (await client(cmd)).request<Diagnosis>('GET', '/api/v1/scaler/diagnose');
      warnIfPartial(d);
      if (o.json) printJson(d);
      else process.stdout.write(render(d));
      // Scripts and health checks read the exit status: 1 when anything needs fixing.
      if (!d.healthy) process.exitCode = 1;
    });
}
