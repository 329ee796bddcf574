import type { Command } from 'commander';
import type { InstanceStatus } from '../../cluster/instances-repo.js';
import { printJson, table } from '../output.js';
import type { AdminClient } from './client.js';

interface ClusterStatusView {
  self: string;
  instances: InstanceStatus[];
}

/** A heartbeat age for people: "1.2s ago". */
function ago(ms: number): string {
  if (ms < 1000) return `${ms}ms ago`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s ago`;
  if (ms < 3_600_000) return `${Math.round(ms / 60_000)}m ago`;
  return `${Math.round(ms / 3_600_000)}h ago`;
}

export function renderClusterStatus(view: ClusterStatusView): string {
  return table(
    ['INSTANCE', 'ADDRESS', 'STATE', 'LEADER', 'HEARTBEAT', 'AGENTS', 'RUNNING', 'VERSION'],
    view.instances.map((i) => [
      i.id === view.self ? `${i.id} (this)` : i.id,
      i.address,
      i.state,
      i.leader ? 'yes' : 'no',
      ago(i.heartbeatAgeMs),
      i.agentsConnected,
      i.jobsRunning,
      i.version,
    ]),
  );
}

export function registerClusterCommands(
  program: Command,
  client: (c: Command) => Promise<AdminClient>,
): void {
  const cluster = program.command('cluster').description('orchestrators sharing one PostgreSQL');
  cluster
    .command('status')
    .description('every instance: address, alive or not, leader, last heartbeat, agents, running jobs')
    .option('--json', 'machine-readable output')
    .action(async (o: { json?: boolean }, cmd: Command) => {
      const view = await (await client(cmd)).request<ClusterStatusView>('GET', '/api/v1/cluster/status');
      if (o.json) return printJson(view);
      process.stdout.write(renderClusterStatus(view) + '\n');
    });
}
