/**
 * Bare-metal agents an earlier orchestrator left running. The evidence is the host's own: the
 * process's environment names a scaler agent of this scaler, and its launcher is gone (it was
 * re-parented to init), so no orchestrator on this host still owns it.
 */
import { readdirSync } from 'node:fs';
import { procStatOf, readProcFile } from '../../../util/proc-tree.js';
import type { OrphanItem } from '../../types.js';

export interface OrphanAgentProcess extends OrphanItem {
  agentId: string;
  pid: number;
}

function envOf(text: string): Map<string, string> {
  const env = new Map<string, string>();
  for (const kv of text.split('\0')) {
    const eq = kv.indexOf('=');
    if (eq > 0) env.set(kv.slice(0, eq), kv.slice(eq + 1));
  }
  return env;
}

/** A running agent process of one scaler: a group leader with the scaler-managed environment. */
export interface AgentProcess {
  agentId: string;
  pid: number;
  ppid: number;
}

/**
 * Every agent process of `scalerName` on this host: group leaders with `KICI_SCALER_MANAGED=1`, a
 * `kici:scaler:<name>` label and an agent id, whoever launched them. The audit runs this often, so
 * the reads are the synchronous ones of proc-tree.ts, with a turn every 256 processes.
 */
export async function listAgentProcesses(scalerName: string): Promise<AgentProcess[]> {
  let names: string[];
  try {
    names = readdirSync('/proc');
  } catch {
    return [];
  }
  const found: AgentProcess[] = [];
  let n = 0;
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    if (++n % 256 === 0) await new Promise((r) => setImmediate(r));
    const pid = Number(name);
    let env: Map<string, string>;
    try {
      env = envOf(readProcFile(`/proc/${pid}/environ`, 'utf8'));
    } catch {
      continue; // exited, or not ours to read
    }
    const agentId = env.get('KICI_AGENT_ID');
    if (!agentId || env.get('KICI_SCALER_MANAGED') !== '1') continue;
    if (!(env.get('KICI_LABELS') ?? '').split(',').includes(`kici:scaler:${scalerName}`)) continue;
    const stat = procStatOf(pid);
    if (!stat || stat.pgid !== pid) continue;
    found.push({ agentId, pid, ppid: stat.ppid });
  }
  return found;
}

/**
 * Agent processes of `scalerName` that this backend does not track, that are not registered here,
 * and whose launcher has exited. A process whose parent is still alive belongs to a running
 * orchestrator (maybe another one on this host) and is always spared.
 */
export async function findOrphanAgents(
  scalerName: string,
  tracked: (agentId: string) => boolean,
  isRegistered: (agentId: string) => boolean,
): Promise<OrphanAgentProcess[]> {
  return (await listAgentProcesses(scalerName))
    .filter((p) => p.ppid === 1 && !tracked(p.agentId) && !isRegistered(p.agentId))
    .map((p) => ({
      agentId: p.agentId,
      pid: p.pid,
      ref: String(p.pid),
      reason: 'agent process whose orchestrator is gone (re-parented to init) and not registered here',
    }));
}
