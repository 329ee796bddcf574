import type { Command } from 'commander';
import type { PruneReport } from '../../store/retention/pruner.js';
import { printJson, table } from '../output.js';
import type { AdminClient } from './client.js';

export function renderPruneReport(r: PruneReport): string {
  const rows = Object.entries(r.tables).filter(([, n]) => n > 0);
  const verb = r.dryRun ? 'would remove' : 'removed';
  if (!rows.length) return `retention ${verb} nothing\n`;
  const body = table(
    ['TABLE', 'ROWS'],
    rows.map(([t, n]) => [t, n]),
  );
  const tail = r.interrupted ? '\n(stopped early; the rest goes on the next prune)' : '';
  return `${body}\nretention ${verb} ${r.total} row(s)${tail}\n`;
}

export function registerPruneCommand(program: Command, client: (c: Command) => Promise<AdminClient>): void {
  program
    .command('prune')
    .description(
      "delete what the orchestrator's retention settings no longer keep (or, with --dry-run, list it)",
    )
    .option('--dry-run', 'count the rows that would go, delete nothing')
    .option('--json', 'machine-readable output')
    .action(async (o: { dryRun?: boolean; json?: boolean }, cmd: Command) => {
      const r = await (
        await client(cmd)
      ).request<PruneReport>('POST', `/api/v1/prune?dryRun=${o.dryRun ? 'true' : 'false'}`);
      if (o.json) printJson(r);
      else process.stdout.write(renderPruneReport(r));
    });
}
