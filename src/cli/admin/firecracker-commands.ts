import type { Command } from 'commander';
import { printJson, table } from '../output.js';
import type { AdminClient } from './client.js';
import { registerFirecrackerHostCommands } from './firecracker-host-commands.js';

interface VmView {
  scaler: string;
  agentId: string;
  phase: string;
  ip: string | null;
  tap: string | null;
  pid: number | null;
  ageSeconds: number;
  agentConnected: boolean;
  boundJobId: string | null;
}

function age(s: number): string {
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  return `${Math.floor(s / 3600)}h`;
}

/** `kici-admin firecracker list`: the micro-VMs of every VM scaler (type firecracker, any VMM); and the host set-up commands. */
export function registerFirecrackerCommands(
  program: Command,
  client: (cmd: Command) => Promise<AdminClient>,
): void {
  const fc = program.command('firecracker').description('micro-VM agents (scalers of type firecracker)');
  fc.command('list')
    .description('VMs with their IP, TAP, VMM pid, age and agent')
    .option('--json', 'machine-readable output')
    .action(async (o: { json?: boolean }, cmd: Command) => {
      const r = await (await client(cmd)).request<{ vms: VmView[] }>('GET', '/api/v1/scaler/vms');
      if (o.json) return printJson(r.vms);
      if (!r.vms.length) {
        process.stdout.write('no VMs\n');
        return;
      }
      process.stdout.write(
        table(
          ['SCALER', 'AGENT', 'PHASE', 'IP', 'TAP', 'PID', 'AGE', 'CONNECTED', 'JOB'],
          r.vms.map((v) => [
            v.scaler,
            v.agentId,
            v.phase,
            v.ip ?? '-',
            v.tap ?? '-',
            v.pid ?? '-',
            age(v.ageSeconds),
            v.agentConnected ? 'yes' : 'no',
            v.boundJobId ?? '-',
          ]),
        ) + '\n',
      );
    });
  registerFirecrackerHostCommands(fc);
}
