import type { Command } from 'commander';
import { age, printJson, table } from '../output.js';
import type { AdminClient } from './client.js';

interface DeliveryView {
  eventId: string;
  event: string;
  scaler: string;
  agentId: string;
  reason: string | null;
  target: string;
  state: string;
  attempts: number;
  lastError: string | null;
  jobId: string | null;
  createdAt: string;
}

interface EventDetail {
  eventId: string;
  event: string;
  scaler: string;
  agentId: string;
  reason: string | null;
  payload: Record<string, unknown>;
  deliveries: DeliveryView[];
}

/** Short event names in tables: the `kici.scaler.` prefix is the same on every row. */
const shortName = (name: string) => name.replace(/^kici\.scaler\./, '');

export function registerEventCommands(program: Command, client: (c: Command) => Promise<AdminClient>): void {
  const event = program.command('event').description("event scalers' scale-up / scale-down events");

  event
    .command('list')
    .description('scale events, newest first: each target, its delivery state, attempts and last error')
    .option('--name <event>', 'only this event, e.g. kici.scaler.scale-up')
    .option('--scaler <name>', 'only this scaler')
    .option('--json', 'machine-readable output')
    .action(async (o: { name?: string; scaler?: string; json?: boolean }, cmd: Command) => {
      const q = new URLSearchParams();
      if (o.name) q.set('name', o.name);
      if (o.scaler) q.set('scaler', o.scaler);
      const path = `/api/v1/events${q.size ? `?${q.toString()}` : ''}`;
      const res = await (await client(cmd)).request<{ events: DeliveryView[] }>('GET', path);
      if (o.json) return printJson(res.events);
      process.stdout.write(
        table(
          ['EVENT', 'NAME', 'SCALER', 'AGENT', 'REASON', 'TARGET', 'STATE', 'TRIES', 'AGE', 'LAST ERROR'],
          res.events.map((e) => [
            e.eventId,
            shortName(e.event),
            e.scaler,
            e.agentId,
            e.reason,
            e.target,
            e.state,
            e.attempts,
            age(e.createdAt),
            e.lastError,
          ]),
        ) + '\n',
      );
    });

  event
    .command('show <id>')
    .description('one scale event: its payload (claim code cut short) and every delivery')
    .option('--json', 'machine-readable output')
    .action(async (id: string, o: { json?: boolean }, cmd: Command) => {
      const e = await (
        await client(cmd)
      ).request<EventDetail>('GET', `/api/v1/events/${encodeURIComponent(id)}`);
      if (o.json) return printJson(e);
      const lines = [
        `event:   ${e.event} (${e.eventId})`,
        `scaler:  ${e.scaler}`,
        `agent:   ${e.agentId}`,
        ...(e.reason ? [`reason:  ${e.reason}`] : []),
        `payload: ${JSON.stringify(e.payload)}`,
        '',
        table(
          ['TARGET', 'STATE', 'TRIES', 'JOB', 'LAST ERROR'],
          e.deliveries.map((d) => [d.target, d.state, d.attempts, d.jobId, d.lastError]),
        ),
      ];
      process.stdout.write(lines.join('\n') + '\n');
    });
}
