import type { Command } from 'commander';
import { parseDurationMs } from '../../util/duration.js';
import { UsageError } from '../../util/errors.js';
import { age, printJson, table } from '../output.js';
import type { AdminClient } from './client.js';
import { instanceCell, manyInstances, warnIfPartial, type InstanceMarked } from './instance-column.js';
import { registerTokenAdminCommands } from './token-commands.js';

interface AgentView extends InstanceMarked {
  id: string;
  kind: string;
  scaler: string | null;
  labels: string[];
  state: 'idle' | 'busy' | 'draining' | 'disconnected';
  jobId: string | null;
  connectedAt: string;
  disconnectedAt: string | null;
  /** Absent from servers that predate it. */
  uptimeMs?: number | null;
  version?: string | null;
  hostname?: string | null;
  backend?: string | null;
  /** How long an idle agent has been free; null when busy or gone. */
  idleMs?: number | null;
}

const dash = (v: string | null | undefined) => (v === null || v === undefined || v === '' ? '-' : v);

/** The server's own elapsed time when it sends one; a client's clock may disagree with its stamps. */
function upFor(a: AgentView): string {
  if (typeof a.uptimeMs === 'number') return age(new Date(0), new Date(a.uptimeMs));
  return age(a.connectedAt);
}

interface FleetOptions {
  selector?: string;
  all?: boolean;
  json?: boolean;
}

/** The agents one drain acts on: the one named, those carrying every selector label, or all connected. */
async function fleetTargets(c: AdminClient, agentId: string | undefined, o: FleetOptions): Promise<string[]> {
  const ways = [agentId !== undefined, o.selector !== undefined, o.all === true].filter(Boolean).length;
  if (ways !== 1)
    throw new UsageError('agent drain: give exactly one of <agentId>, --selector <labels> or --all');
  if (agentId !== undefined) return [agentId];
  const want = (o.selector ?? '')
    .split(',')
    .map((l) => l.trim())
    .filter(Boolean);
  if (o.selector !== undefined && !want.length)
    throw new UsageError('--selector: at least one label, comma-separated (linux,gpu)');
  const { self, agents } = await c.request<{ self?: string; agents: AgentView[] }>('GET', '/api/v1/agents');
  const chosen = agents.filter((a) => a.state !== 'disconnected' && want.every((l) => a.labels.includes(l)));
  // The list shows every instance's agents; a drain is carried out by the instance that holds the agent.
  const elsewhere = chosen.filter(
    (a) => self !== undefined && a.instance !== undefined && a.instance !== self,
  );
  if (elsewhere.length)
    process.stderr.write(
      `left ${elsewhere.length} agent(s) connected to other instances (${elsewhere.map((a) => `${a.id} on ${instanceCell(a)}`).join(', ')}): run the drain against those instances; \`kici-admin cluster status\` lists their addresses\n`,
    );
  return chosen.filter((a) => !elsewhere.includes(a)).map((a) => a.id);
}

export function registerAgentCommands(program: Command, client: (c: Command) => Promise<AdminClient>): void {
  const agent = program.command('agent').description('agents and their tokens');

  agent
    .command('list')
    .description('agents: connected ones, and static ones within their reconnect grace')
    .option('--json', 'machine-readable output')
    .action(async (o: { json?: boolean }, cmd: Command) => {
      const res = await (
        await client(cmd)
      ).request<{ agents: AgentView[]; peersUnavailable?: string }>('GET', '/api/v1/agents');
      warnIfPartial(res);
      if (o.json) return printJson(res.agents);
      const many = manyInstances(res.agents);
      process.stdout.write(
        table(
          [
            'AGENT',
            'KIND',
            'STATE',
            'JOB',
            'SCALER',
            'BACKEND',
            'HOST',
            'VERSION',
            'UP',
            'IDLE',
            'LABELS',
            ...(many ? ['INSTANCE'] : []),
          ],
          res.agents.map((a) => [
            a.id,
            a.kind,
            a.state,
            a.jobId,
            a.scaler,
            dash(a.backend),
            dash(a.hostname),
            dash(a.version),
            a.state === 'disconnected' ? `gone ${age(a.disconnectedAt)}` : upFor(a),
            typeof a.idleMs === 'number' ? age(new Date(0), new Date(a.idleMs)) : '-',
            a.labels.filter((l) => !l.startsWith('kici:')).join(','),
            ...(many ? [instanceCell(a)] : []),
          ]),
        ) + '\n',
      );
    });

  agent
    .command('drain [agentId]')
    .description('finish the current job, then take no more (the agent stays connected)')
    .option('--selector <labels>', 'drain every agent that carries all of these comma-separated labels')
    .option('--all', 'drain every connected agent')
    .option('--json', 'machine-readable output')
    .action(async (agentId: string | undefined, o: FleetOptions, cmd: Command) => {
      const c = await client(cmd);
      const ids = await fleetTargets(c, agentId, o);
      const drained: AgentView[] = [];
      for (const id of ids)
        drained.push(await c.request<AgentView>('POST', `/api/v1/agents/${encodeURIComponent(id)}/drain`));
      if (o.json) return printJson(agentId ? drained[0] : drained);
      for (const a of drained)
        process.stdout.write(`agent ${a.id}: ${a.state}${a.jobId ? ` (finishing job ${a.jobId})` : ''}\n`);
      if (!agentId) process.stdout.write(`${drained.length} agent(s) drained\n`);
    });

  agent
    .command('resume <agentId>')
    .description('take jobs again after a drain')
    .option('--json', 'machine-readable output')
    .action(async (agentId: string, o: { json?: boolean }, cmd: Command) => {
      const a = await (
        await client(cmd)
      ).request<AgentView>('POST', `/api/v1/agents/${encodeURIComponent(agentId)}/resume`);
      if (o.json) return printJson(a);
      process.stdout.write(`agent ${a.id}: ${a.state}\n`);
    });

  const token = agent.command('token').description('agent tokens');
  token
    .command('create')
    .description('mint a long-lived token for a static agent, bound to an agent id and its labels')
    .requiredOption('--labels <labels>', 'comma-separated labels the agent may register with')
    .option('--id <agentId>', 'agent id (default: a generated static-<hex> id)')
    .option('--ttl <duration>', 'lifetime: seconds or 90m, 12h, 30d; "never" for none (default: 90d)')
    .option('--json', 'machine-readable output')
    .action(async (o: { labels: string; id?: string; ttl?: string; json?: boolean }, cmd: Command) => {
      const labels = o.labels
        .split(',')
        .map((l) => l.trim())
        .filter(Boolean);
      if (!labels.length) throw new UsageError('--labels: at least one label');
      // Absent: the server's default (90 days); "never" is asked for explicitly.
      let ttlSeconds: number | null | undefined;
      if (o.ttl === 'never') ttlSeconds = null;
      else if (o.ttl !== undefined) {
        const ms = parseDurationMs(o.ttl);
        if (ms === undefined)
          throw new UsageError(`--ttl: seconds, a duration such as 12h or 30d, or "never"; got "${o.ttl}"`);
        ttlSeconds = Math.ceil(ms / 1000);
      }
      const res = await (
        await client(cmd)
      ).request<{
        tokenId: string;
        agentId: string;
        labels: string[];
        token: string;
        expiresAt: string | null;
      }>('POST', '/api/v1/agents/tokens', {
        labels,
        ...(o.id ? { agentId: o.id } : {}),
        ...(ttlSeconds !== undefined ? { ttlSeconds } : {}),
      });
      if (o.json) return printJson(res);
      process.stdout.write(
        `token id: ${res.tokenId}\nagent id: ${res.agentId}\nlabels:   ${res.labels.join(',')}\nexpires:  ${res.expiresAt ?? 'never'}\n\n` +
          `Start the agent with:\n  KICI_ORCHESTRATOR_URL=<ws://host:port/ws> KICI_AGENT_ID=${res.agentId} \\\n` +
          `  KICI_AGENT_TOKEN=${res.token} KICI_LABELS=${res.labels.join(',')} kici-agent\n\n` +
          'The token is shown once; only its hash is stored.\n',
      );
    });

  registerTokenAdminCommands(token, client);
}
