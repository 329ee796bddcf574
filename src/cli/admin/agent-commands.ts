import type { Command } from 'commander';
import { parseDurationMs } from '../../util/duration.js';
import { UsageError } from '../../util/errors.js';
import { age, printJson, table } from '../output.js';
import type { AdminClient } from './client.js';
import { registerTokenAdminCommands } from './token-commands.js';

interface AgentView {
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
}

/** The server's own elapsed time when it sends one; a client's clock may disagree with its stamps. */
function upFor(a: AgentView): string {
  if (typeof a.uptimeMs === 'number') return age(new Date(0), new Date(a.uptimeMs));
  return age(a.connectedAt);
}

export function registerAgentCommands(program: Command, client: (c: Command) => Promise<AdminClient>): void {
  const agent = program.command('agent').description('agents and their tokens');

  agent
    .command('list')
    .description('agents: connected ones, and static ones within their reconnect grace')
    .option('--json', 'machine-readable output')
    .action(async (o: { json?: boolean }, cmd: Command) => {
      const res = await (await client(cmd)).request<{ agents: AgentView[] }>('GET', '/api/v1/agents');
      if (o.json) return printJson(res.agents);
      process.stdout.write(
        table(
          ['AGENT', 'KIND', 'STATE', 'JOB', 'SCALER', 'UP', 'LABELS'],
          res.agents.map((a) => [
            a.id,
            a.kind,
            a.state,
            a.jobId,
            a.scaler,
            a.state === 'disconnected' ? `gone ${age(a.disconnectedAt)}` : upFor(a),
            a.labels.filter((l) => !l.startsWith('kici:')).join(','),
          ]),
        ) + '\n',
      );
    });

  for (const [verb, what] of [
    ['drain', 'finish the current job, then take no more (the agent stays connected)'],
    ['resume', 'take jobs again after a drain'],
  ] as const) {
    agent
      .command(`${verb} <agentId>`)
      .description(what)
      .option('--json', 'machine-readable output')
      .action(async (agentId: string, o: { json?: boolean }, cmd: Command) => {
        const a = await (
          await client(cmd)
        ).request<AgentView>('POST', `/api/v1/agents/${encodeURIComponent(agentId)}/${verb}`);
        if (o.json) return printJson(a);
        const job = a.jobId ? ` (finishing job ${a.jobId})` : '';
        process.stdout.write(`agent ${a.id}: ${a.state}${verb === 'drain' ? job : ''}\n`);
      });
  }

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
