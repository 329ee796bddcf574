/**
 * One bare-metal spawn: the checks every spawn makes, then the agent's container (job-image mode)
 * or its process. It is a cold agent start that a job waits on, so it stays one async function
 * from the first check to the started process, with no await the start does not need.
 */
import { normalizeLabelSet, type LabelSetConfig, type ScalerEntry } from '../../../config/index.js';
import { startTicksOf } from '../../../util/proc-tree.js';
import { DeterministicSpawnError, SpawnError } from '../../core/spawn-errors.js';
import type { AgentAuth, ManagedAgent, SpawnContext } from '../../types.js';
import { buildAgentEnv } from './env.js';
import { isJobImageSet, type JobImageAgents } from './job-image.js';
import { unplace } from './placement.js';
import type { ProcessAgents, ProcessParts, Tracked } from './process-agents.js';
import { stopAgentTree } from './process-group.js';
import { launchAgentProcess, type LaunchDeps } from './process-launch.js';
import { captureOutput, OutputTail, reportEarlyExit } from './process-output.js';
import type { AgentChild } from './spawner/agent-child.js';

/** What a spawn reads from its backend, and where it holds the agent process it starts. */
export interface SpawnHost extends ProcessParts {
  /** Where the spawn holds its agent, and lets go of it when the start fails or is abandoned. */
  readonly processes: Pick<ProcessAgents, 'hold' | 'drop'>;
  readonly jobImage: JobImageAgents | undefined;
  /** The config in force for new spawns (applyReload replaces it). */
  entry(): ScalerEntry;
  hostEnv(): NodeJS.ProcessEnv;
  /** Agents the scaler holds compute for, in both modes: what its maxAgents bounds. */
  activeCount(): number;
  binaryPathFor(ls: LabelSetConfig): string | undefined;
  /** What launching the agent process needs, as of this spawn. */
  launchDeps(): LaunchDeps;
}

export async function spawnAgent(host: SpawnHost, req: SpawnContext): Promise<ManagedAgent> {
  const { key, ls } = admittedLabelSet(host.entry(), host.scaler, req.labelSet, () => host.activeCount());
  if (isJobImageSet(ls)) {
    // A container is not something the spawner could undo: its record comes first. Without one to
    // write, no await: the job-image agents must know this spawn before a destroy can come.
    if (req.record) await req.record();
    return spawnJobImageAgent(host.jobImage, host.scaler, req, ls, key);
  }
  const binary = host.binaryPathFor(ls);
  if (!binary) {
    throw new DeterministicSpawnError(
      'config',
      `label set [${key}] has no binaryPath (job-image mode needs a container runtime)`,
    );
  }
  const agent = spawningAgent(req);
  if (req.signal.aborted) throw new SpawnError('spawn-timeout', 'spawn aborted before it started');
  assertTokenAuth(req.auth);
  const tracked: Tracked = {
    agent,
    registered: false,
    destroying: false,
    tail: new OutputTail(),
    placement: {},
  };
  host.processes.hold(req.agentId, tracked);
  req.onEvent('scaler.provisioning', 'spawning agent process');
  const { env, trusted } = buildAgentEnv(host.hostEnv(), ls, {
    orchestratorUrl: req.orchestratorUrl,
    agentId: req.agentId,
    fullLabels: req.fullLabels,
  });
  if (trusted) host.log.warn({ agentId: req.agentId }, 'agent started with the trusted environment profile');

  let child: AgentChild;
  try {
    child = await launchAgentProcess(req, ls, binary, env, req.auth.token, tracked, host.launchDeps());
  } catch (err) {
    host.processes.drop(req.agentId);
    throw err;
  }
  child.unref();
  const pid = child.pid;
  tracked.child = child;
  tracked.pgid = pid;
  tracked.startTicks = startTicksOf(pid);
  agent.backendRef = String(pid);
  agent.state = 'running';
  captureOutput(host.log, agent.id, tracked.tail, child, req.onEvent);
  // 'close' comes after the output streams ended, so the failure message carries the whole tail.
  child.onClose((code, signal) => reportEarlyExit(req, tracked, code, signal));
  if (req.signal.aborted || tracked.destroying) {
    // Abandoned (deadline, or destroy() ran before the process existed) while starting: it must not outlive that.
    host.processes.drop(req.agentId);
    await stopAgentTree(req.agentId, pid, host.stopGraceMs, tracked.startTicks);
    await host.limits.release(req.agentId).catch(host.cgroupLeft(req.agentId));
    await unplace(req.agentId, tracked.placement, host.users).catch(host.placeLeft(req.agentId));
    throw new SpawnError('spawn-timeout', 'spawn aborted');
  }
  req.onEvent('scaler.ready', `agent process started (PID ${pid})`);
  req.onEvent('agent.connecting', 'waiting for the agent to register');
  return agent;
}

/** The label set asked for, when this scaler serves it and has room for one more agent. */
function admittedLabelSet(
  entry: ScalerEntry,
  scaler: string,
  labelSet: string[],
  activeCount: () => number,
): { key: string; ls: LabelSetConfig } {
  const key = normalizeLabelSet(labelSet);
  const ls = entry.labelSets.find((l) => normalizeLabelSet(l.labels) === key);
  if (!ls)
    throw new SpawnError('config', `label set [${key}] is not served by bare-metal scaler "${scaler}"`);
  if (activeCount() >= entry.maxAgents) {
    throw new SpawnError(
      'capacity',
      `bare-metal scaler "${scaler}" is at capacity (${activeCount()}/${entry.maxAgents})`,
    );
  }
  return { key, ls };
}

/** Both modes' agents register with a token; one given a claim code is refused before anything starts. */
function assertTokenAuth(auth: AgentAuth): asserts auth is Extract<AgentAuth, { kind: 'token' }> {
  if (auth.kind !== 'token') {
    throw new DeterministicSpawnError(
      'config',
      'bare-metal agents authenticate with a token, not a claim code',
    );
  }
}

/** The agent a spawn hands back, before it has a process (or container) to name in backendRef. */
function spawningAgent(req: Pick<SpawnContext, 'agentId' | 'labelSet'>): ManagedAgent {
  return {
    id: req.agentId,
    labelSet: req.labelSet,
    backendRef: '',
    spawnedAt: Date.now(),
    state: 'spawning',
  };
}

/** Job-image mode: the agent runs in a container (the job's image, our runtime injected). */
async function spawnJobImageAgent(
  jobImage: JobImageAgents | undefined,
  scaler: string,
  req: SpawnContext,
  ls: LabelSetConfig,
  key: string,
): Promise<ManagedAgent> {
  if (!jobImage)
    throw new DeterministicSpawnError(
      'config',
      `label set [${key}] is job-image mode (image, no binaryPath) but scaler "${scaler}" has no container runtime; restart after fixing the runtime and nft`,
    );
  assertTokenAuth(req.auth);
  if (req.signal.aborted) throw new SpawnError('spawn-timeout', 'spawn aborted before it started');
  return jobImage.spawn(req, ls, spawningAgent(req));
}
