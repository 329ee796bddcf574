/**
 * The floor of a confined cold start: the launch a bare-metal scaler would make for one agent (the
 * uid switch, the sandbox when the host's plan has one, the sealed Node), prepared by hand with the
 * backend's own parts and no orchestrator. Only the start itself is left to time.
 */
import { join, resolve } from 'node:path';
import { probeHostFacts } from '../dist/scaler/backends/bare-metal/host-probe.js';
import { modeIn, planConfinement } from '../dist/scaler/backends/bare-metal/confinement-plan.js';
import { launchCommand } from '../dist/scaler/backends/bare-metal/launch.js';
import {
  findOnPath,
  placeAgent,
  placementEnv,
  unplace,
} from '../dist/scaler/backends/bare-metal/placement.js';
import { SealedRuntime } from '../dist/scaler/backends/bare-metal/sealed-runtime.js';
import { AgentUserPool } from '../dist/scaler/backends/bare-metal/users.js';
import type { ScalerEntry } from '../dist/config/index.js';

const AGENT = join(resolve(import.meta.dirname, '..'), 'dist/cli/agent.js');

export interface ConfinedLaunch {
  file: string;
  args: string[];
  env: Record<string, string>;
  /** The uid and gid the forker switches to itself, as a root orchestrator's spawner does. */
  as?: { uid: number; gid: number } | undefined;
  mode: string;
  /** Undo the placement (kill the uid's processes, remove the home, free the uid). */
  release(): Promise<void>;
}

/** The confined launch of `entry`'s first label set on this host, for the agent id `agentId`. */
export async function confinedLaunch(
  entry: ScalerEntry,
  dataDir: string,
  agentId: string,
): Promise<ConfinedLaunch> {
  const ls = entry.labelSets[0]!;
  const plan = planConfinement(entry, probeHostFacts(process.env), process.env);
  const mode = modeIn(plan, ls);
  const node = findOnPath('node', process.env.PATH);
  const runtime = mode === 'host' || !node ? undefined : await new SealedRuntime(() => {}).for(node);
  const users = new AgentUserPool();
  const placement = await placeAgent(
    agentId,
    mode,
    ls,
    process.env,
    users,
    { dataDir, files: [], home: process.env.HOME },
    runtime ? [runtime] : [],
  );
  const { file, args, as } = launchCommand({
    binary: AGENT,
    runtime,
    user: placement.user,
    sandbox: placement.sandbox,
    forkerIsRoot: process.getuid?.() === 0,
  });
  return {
    file,
    args,
    as,
    env: { ...placementEnv(placement), ...(mode === 'host' ? { KICI_AGENT_SEAL: 'off' } : {}) },
    mode,
    release: () => unplace(agentId, placement, users),
  };
}

/** The one-label-set bare-metal scaler the cold-start benches start (`trust: host` when asked). */
export function benchEntry(trustHost = false): ScalerEntry {
  return {
    name: 'bm',
    type: 'bare-metal',
    maxAgents: 1,
    labelSets: [{ labels: ['linux', 'small'], binaryPath: AGENT, ...(trustHost ? { trust: 'host' } : {}) }],
  } as unknown as ScalerEntry;
}

/** The environment of an agent started by hand (the raw start, the floor, the minimal server's). */
export function handStartEnv(
  agentId: string,
  confined?: ConfinedLaunch,
  more: Record<string, string> = {},
): Record<string, string> {
  return {
    ...confined?.env,
    PATH: process.env.PATH ?? '',
    KICI_AGENT_ID: agentId,
    KICI_AGENT_TOKEN: 'raw',
    KICI_LABELS: 'linux,small',
    KICI_SCALER_MANAGED: '1',
    ...more,
  };
}
