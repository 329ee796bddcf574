/** `kici-admin scaler reload`: the orchestrator asked, and (unless `--single`) its live peers, reload. */
import type { Command } from 'commander';
import { MAX_RELOAD_TIMEOUT_S, parseReloadRequest } from '../../server/reload-request.js';
import { UsageError } from '../../util/errors.js';
import { printJson } from '../output.js';
import type { AdminClient } from './client.js';

/** How long the orchestrator asked waits for its peers' answers, unless `--timeout` says otherwise. */
export const DEFAULT_RELOAD_TIMEOUT_S = 60;

interface ReloadPlanView {
  added?: string[];
  updated?: string[];
  unchanged?: string[];
  retired?: string[];
  resurrected?: string[];
  global?: string[];
}

interface ReloadView {
  result: string;
  problems?: string[];
  plan?: ReloadPlanView;
  instances?: { instance: string; result: string; problems: string[] }[];
}

export function registerReloadCommand(scaler: Command, client: (c: Command) => Promise<AdminClient>): void {
  scaler
    .command('reload')
    .description('reload the scaler configuration of the running orchestrator and of its live peers')
    .option('--single', 'only the orchestrator asked, not its peers')
    .option(
      '--timeout <seconds>',
      `how long to wait for the peers' answers, 1 to ${MAX_RELOAD_TIMEOUT_S}`,
      String(DEFAULT_RELOAD_TIMEOUT_S),
    )
    .option('--json', 'machine-readable output')
    .action(async (o: { single?: boolean; timeout: string; json?: boolean }, cmd: Command) => {
      // The server judges the same way; judged here first so a typo costs no reload.
      const parsed = parseReloadRequest({ timeout: o.timeout });
      if (!parsed.ok) throw new UsageError(parsed.problems.join('; ').replace(/^timeout:/, '--timeout:'));
      const query = `single=${o.single ? 'true' : 'false'}&timeout=${encodeURIComponent(o.timeout)}`;
      const r = await (await client(cmd)).request<ReloadView>('POST', `/api/v1/scaler/reload?${query}`);
      if (o.json) printJson(r);
      else {
        process.stdout.write(`${r.result}\n`);
        for (const p of r.problems ?? []) process.stdout.write(`  ${p}\n`);
        if (r.plan) process.stdout.write(renderReloadPlan(r.plan));
        // Several orchestrators on one database: each one's own answer.
        for (const i of r.instances ?? []) {
          process.stdout.write(`instance ${i.instance}: ${i.result}\n`);
          for (const p of i.problems) process.stdout.write(`  ${p}\n`);
        }
      }
      const refused = (r.instances ?? []).some(
        (i) => i.result !== 'applied' && i.result !== 'not-configured',
      );
      if (r.result === 'rejected' || refused) process.exitCode = 1;
    });
}

/** A reload's plan as text: one line per kind of change that has entries. */
export function renderReloadPlan(plan: ReloadPlanView): string {
  const rows: [string, string[] | undefined][] = [
    ['added', plan.added],
    ['updated', plan.updated],
    ['retired', plan.retired],
    ['resurrected', plan.resurrected],
    ['unchanged', plan.unchanged],
    ['global settings changed', plan.global],
  ];
  return rows
    .filter(([, names]) => names && names.length)
    .map(([what, names]) => `  ${what}: ${names!.join(', ')}\n`)
    .join('');
}
