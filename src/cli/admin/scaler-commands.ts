import type { Command } from 'commander';
import { printJson, table } from '../output.js';
import { registerAuditCommand } from './audit-command.js';
import type { AdminClient } from './client.js';
import { instanceCell, manyInstances, warnIfPartial, type InstanceMarked } from './instance-column.js';
import { registerOrphanCommands } from './orphan-commands.js';
import { registerReloadCommand } from './reload-command.js';

interface GlobalFigures {
  globalMaxAgents?: number;
  globalActive?: number;
  globalReserved?: number;
  globalUsage?: { cpus: number; memBytes: number };
}

interface StatusView extends GlobalFigures {
  configured: boolean;
  /** Each instance's global figures (cluster view); absent from servers that predate it. */
  instances?: (GlobalFigures & InstanceMarked & { configured: boolean })[];
  peersUnavailable?: string;
  scalers: (InstanceMarked & {
    name: string;
    type: string;
    /** Removed by a reload and still draining its agents. */
    retiring?: boolean;
    agents?: { agentId: string; phase: string }[];
    active: number;
    spawning: number;
    reserved: number;
    maxAgents: number;
    usage: { cpus: number; memBytes: number };
    resourceCap: { maxCpu?: number; maxMemoryBytes?: number } | null;
    backoff: {
      labelSet: string;
      consecutiveFailures: number;
      retryInMs: number;
      lastError: { kind: string; message: string } | null;
    }[];
    /** The last lift of each label set's backoff: by a reload that changed the scaler, or by an operator. */
    backoffLifted?: {
      labelSet: string;
      by: 'reload' | 'operator';
      at: string;
      consecutiveFailures: number;
      /** An operator's lift: the access token that asked, and the instance the request went to. */
      requestedBy?: string | null;
      via?: string | null;
    }[];
    /** Bare-metal: how each label set's jobs are confined, and the risk of an unconfined one. */
    confinement?: { labelSet: string; mode: string; risk: string | null }[];
    /** Event scalers: the last scale event a provisioning target gave up on. */
    deliveryGivenUp?: {
      eventId: string;
      event: string;
      target: string;
      agentId: string;
      lastError: string;
    } | null;
    warmPool: {
      enabled: boolean;
      size: number;
      pools: {
        labelSet: string;
        target: number;
        ready: number;
        inFlight: number;
        /** The next scheduled size, for a pool with a schedule. */
        next?: { at: string; size: number } | null;
      }[];
      skipped?: { labelSet: string; reason: string }[];
    } | null;
  })[];
}

const globalLine = (g: GlobalFigures) =>
  `${g.globalActive}/${g.globalMaxAgents} agents, ${g.globalReserved} reserved, ${g.globalUsage!.cpus} cpu, ${mib(g.globalUsage!.memBytes)}`;

const mib = (b: number) => `${Math.round(b / 1048576)}Mi`;

/** Who lifted a backoff: a reload, or an operator (with the token and the instance asked, when known). */
function liftedBy(l: { by: string; requestedBy?: string | null; via?: string | null }): string {
  if (l.by === 'reload') return 'a reload';
  const detail = [
    ...(l.requestedBy ? [`token ${JSON.stringify(l.requestedBy)}`] : []),
    ...(l.via ? [`via instance ${l.via}`] : []),
  ];
  return detail.length ? `an operator (${detail.join(', ')})` : 'an operator';
}

export function registerScalerApiCommands(
  scaler: Command,
  client: (c: Command) => Promise<AdminClient>,
): void {
  scaler
    .command('status')
    .description('per scaler: agents, reservations, usage, caps, backoff and warm pool')
    .option('--json', 'machine-readable output')
    .action(async (o: { json?: boolean }, cmd: Command) => {
      const s = await (await client(cmd)).request<StatusView>('GET', '/api/v1/scaler/status');
      warnIfPartial(s);
      if (o.json) return printJson(s);
      if (!s.configured) return void process.stdout.write('no scaler is configured\n');
      const many = manyInstances(s.scalers);
      // One instance's rows: its figures (not the answering one's, which may run no scaler).
      const only = s.globalUsage ? s : s.instances?.find((x) => x.configured && x.globalUsage);
      if (!many) process.stdout.write(only ? `global: ${globalLine(only)}\n` : '');
      // One line per instance: each holds its own caps and counts.
      else
        for (const g of (s.instances ?? []).filter((x) => x.configured))
          process.stdout.write(`global (${instanceCell(g)}): ${globalLine(g)}\n`);
      process.stdout.write(
        table(
          [
            'SCALER',
            'TYPE',
            'ACTIVE',
            'SPAWNING',
            'RESERVED',
            'MAX',
            'CPU',
            'MEMORY',
            'CAP',
            'WARM',
            'BACKOFF',
            ...(many ? ['INSTANCE'] : []),
          ],
          s.scalers.map((r) => [
            r.retiring ? `${r.name} (retiring)` : r.name,
            r.type,
            r.active,
            r.spawning,
            r.reserved,
            r.maxAgents,
            r.usage.cpus,
            mib(r.usage.memBytes),
            r.resourceCap
              ? `${r.resourceCap.maxCpu ?? '∞'} cpu/${r.resourceCap.maxMemoryBytes ? mib(r.resourceCap.maxMemoryBytes) : '∞'}`
              : '-',
            r.warmPool?.enabled
              ? r.warmPool.pools
                  .map(
                    (p) =>
                      `[${p.labelSet}] ${p.ready}/${p.target}${p.inFlight ? `+${p.inFlight}` : ''}${p.next ? `, ${p.next.size} at ${p.next.at}` : ''}`,
                  )
                  .join(' ')
              : '-',
            r.backoff.length
              ? r.backoff
                  .map(
                    (b) =>
                      `[${b.labelSet}] ${b.consecutiveFailures}x, retry in ${Math.ceil(b.retryInMs / 1000)}s: ${b.lastError?.message ?? ''}`,
                  )
                  .join('; ')
              : '-',
            ...(many ? [instanceCell(r)] : []),
          ]),
        ) + '\n',
      );
      const who = (r: InstanceMarked & { name: string }) =>
        many ? `${r.name} (${instanceCell(r)})` : r.name;
      for (const r of s.scalers) {
        for (const k of r.warmPool?.skipped ?? [])
          process.stdout.write(`${who(r)}: the warm pool skips label set [${k.labelSet}]: ${k.reason}\n`);
      }
      for (const r of s.scalers) {
        for (const l of r.backoffLifted ?? [])
          process.stdout.write(
            `${who(r)}: backoff of [${l.labelSet}] lifted by ${liftedBy(l)} at ${l.at} (after ${l.consecutiveFailures} failure(s))\n`,
          );
      }
      for (const r of s.scalers) {
        for (const c of r.confinement ?? []) if (c.risk) process.stdout.write(`${who(r)}: risk: ${c.risk}\n`);
      }
      for (const r of s.scalers) {
        const g = r.deliveryGivenUp;
        if (g)
          process.stdout.write(
            `${who(r)}: ${g.event} for ${g.agentId} to ${g.target} was given up: ${g.lastError} (kici-admin event show ${g.eventId})\n`,
          );
      }
      for (const r of s.scalers.filter((x) => x.retiring)) {
        const left = (r.agents ?? []).map((a) => `${a.agentId} (${a.phase})`).join(', ');
        process.stdout.write(
          `${who(r)}: retiring, ${r.agents?.length ?? 0} agent(s) left${left ? `: ${left}` : ''}\n`,
        );
      }
    });

  scaler
    .command('explain <jobId>')
    .description('why this job is or is not being scaled')
    .option('--json', 'machine-readable output')
    .action(async (jobId: string, o: { json?: boolean }, cmd: Command) => {
      const r = await (
        await client(cmd)
      ).request<{ jobId: string; state: string; lines: string[] }>(
        'GET',
        `/api/v1/scaler/explain/${encodeURIComponent(jobId)}`,
      );
      if (o.json) return printJson(r);
      process.stdout.write(`job ${r.jobId} (${r.state})\n${r.lines.map((l) => `  ${l}`).join('\n')}\n`);
    });

  registerReloadCommand(scaler, client);

  scaler
    .command('reset-backoff <scaler>')
    .description("lift a scaler's provisioning backoff (every label set, or one) once its cause is fixed")
    .option('--label-set <labels>', 'only this label set, as status shows it (labels joined by ",")')
    .option('--json', 'machine-readable output')
    .action(async (name: string, o: { labelSet?: string; json?: boolean }, cmd: Command) => {
      const r = await (
        await client(cmd)
      ).request<ResetAnswer>('POST', '/api/v1/scaler/reset-backoff', {
        scaler: name,
        ...(o.labelSet !== undefined ? { labelSet: o.labelSet } : {}),
      });
      if (o.json) return printJson(r);
      process.stdout.write(resetLines(r));
    });

  registerAuditCommand(scaler, client);

  registerOrphanCommands(scaler, client);
}

/** reset-backoff's answer; `instances` only from a cluster (each live instance's part). */
interface ResetAnswer {
  scaler: string;
  cleared: string[];
  instances?: { instance: string; answered: boolean; cleared: string[] }[];
}

function resetLines(r: ResetAnswer): string {
  const sets = (l: string[]) => l.map((x) => `[${x}]`).join(' ');
  const head = r.cleared.length
    ? `scaler ${r.scaler}: backoff lifted for ${sets(r.cleared)}\n`
    : `scaler ${r.scaler}: no label set was backing off\n`;
  const each = (r.instances ?? []).map((i) =>
    !i.answered
      ? `  instance ${i.instance}: no answer yet (it lifts the backoff when it catches up)\n`
      : `  instance ${i.instance}: ${i.cleared.length ? `lifted ${sets(i.cleared)}` : 'nothing was backing off'}\n`,
  );
  return head + each.join('');
}
