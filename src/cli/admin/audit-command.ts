/** `kici-admin scaler audit`: the store's view of what is alive against what each backend has. */
import type { Command } from 'commander';
import { printJson, table } from '../output.js';
import type { AdminClient } from './client.js';

interface DriftView {
  kind: string;
  resource: string;
  scaler: string | null;
  agentId: string | null;
  ref: string;
}

interface AuditView {
  drift: DriftView[];
  unchecked: { scaler: string; reason: string }[];
  fixed?: { drift: DriftView; ok: boolean; error?: string }[];
  remaining?: DriftView[];
}

function driftTable(items: DriftView[]): string {
  return table(
    ['KIND', 'RESOURCE', 'SCALER', 'AGENT', 'REF'],
    items.map((d) => [d.kind, d.resource, d.scaler ?? '-', d.agentId ?? '-', d.ref]),
  );
}

/** `scaler audit`: exit 0 with no drift left, 1 with drift (or a scaler that could not be asked). */
export function registerAuditCommand(scaler: Command, client: (c: Command) => Promise<AdminClient>): void {
  scaler
    .command('audit')
    .description('compare what the store says is alive with what each backend really has; exit 1 on drift')
    .option(
      '--fix',
      'reconcile: reclaim unrecorded compute, drop records with nothing behind them, revoke stray tokens',
    )
    .option('--json', 'machine-readable output')
    .action(async (o: { fix?: boolean; json?: boolean }, cmd: Command) => {
      const c = await client(cmd);
      const r = o.fix
        ? await c.request<AuditView>('POST', '/api/v1/scaler/audit/fix')
        : await c.request<AuditView>('GET', '/api/v1/scaler/audit');
      const left = o.fix ? (r.remaining ?? []) : r.drift;
      if (o.json) printJson(r);
      else {
        if (!r.drift.length) process.stdout.write('no drift: the store and the backends agree\n');
        else process.stdout.write(`drift (${r.drift.length}):\n${driftTable(r.drift)}\n`);
        for (const f of r.fixed ?? [])
          if (!f.ok) process.stdout.write(`could not fix ${f.drift.kind} ${f.drift.ref}: ${f.error ?? ''}\n`);
        if (o.fix && r.drift.length)
          process.stdout.write(
            left.length
              ? `left after --fix (${left.length}):\n${driftTable(left)}\n`
              : 'fixed: no drift left\n',
          );
        for (const u of r.unchecked) process.stdout.write(`${u.scaler}: not audited: ${u.reason}\n`);
      }
      if (left.length || r.unchecked.some((u) => u.reason !== 'cannot list its compute'))
        process.exitCode = 1;
    });
}
