import { accessSync, constants, statSync } from 'node:fs';
import type { LabelSetConfig } from '../../../config/index.js';
import { errorMessage } from '../../../util/errors.js';
import { DeterministicSpawnError, SpawnError } from '../../core/spawn-errors.js';
import type { SpawnContext } from '../../types.js';
import type { AgentLimits } from './agent-limits.js';
import { spawnDirect, type AgentChild } from './spawner/agent-child.js';
import type { AgentSpawner } from './spawner/agent-spawner.js';
import { stopAgentTree } from './process-group.js';
import { launchCommand } from './launch.js';
import { launchError } from './launch-error.js';
import type { ConfinementMode } from './confinement.js';
import {
  findOnPath,
  placeAgent,
  placementEnv,
  unplace,
  type Placement,
  type SecretPaths,
} from './placement.js';
import { runsOnNode, type SealedRuntime } from './sealed-runtime.js';
import type { AgentUserPool } from './users.js';

export interface LaunchDeps {
  users: AgentUserPool;
  secrets: SecretPaths;
  /** How each label set's agents are confined (chosen at start-up and on reload). */
  modeOf(ls: LabelSetConfig): ConfinementMode;
  hostEnv: NodeJS.ProcessEnv;
  /** How this scaler's limits are applied (a no-op when they are not enforced). */
  limits: AgentLimits;
  /** The execute-only Node agents start from, sealed (undefined: they seal themselves). */
  runtime?: SealedRuntime | undefined;
  /** Where a failed clean-up is logged and counted. */
  placeLeft(agentId: string): (err: unknown) => void;
  /** Starts agents outside the orchestrator's own (large) process; absent or not ready: forked here. */
  spawner?: AgentSpawner | undefined;
  cgroupLeft(agentId: string): (err: unknown) => void;
  /** The orchestrator (and so its spawner) runs as root: it may start agents under their uid itself. */
  forkerIsRoot?: boolean | undefined;
}

/**
 * Start one process-mode agent: its user/work dir/sandbox (placement), its limits, then the process
 * itself in its own group. On any failure whatever was made is undone, `scaler.failed` is emitted
 * and a classified error is thrown; `tracked.placement` is filled as soon as it exists, so a destroy
 * that races the start finds it.
 */
export async function launchAgentProcess(
  req: SpawnContext,
  ls: LabelSetConfig,
  binary: string,
  env: Record<string, string>,
  token: string,
  tracked: { placement: Placement },
  deps: LaunchDeps,
): Promise<AgentChild> {
  const id = req.agentId;
  const undo = async () => {
    await deps.limits.release(id).catch(deps.cgroupLeft(id));
    await unplace(id, tracked.placement, deps.users).catch(deps.placeLeft(id));
  };
  const fail = async (message: string, err: unknown): Promise<never> => {
    await undo();
    req.onEvent('scaler.failed', message);
    throw new DeterministicSpawnError('config', message, { cause: err });
  };
  const mode = deps.modeOf(ls);
  // An unconfined agent runs as the orchestrator's uid, with its files in reach: sealing would hide
  // nothing a step could not read from the orchestrator itself, and would hide the agent's
  // environment from the orchestrator, which finds its agents by it after a restart.
  if (mode === 'host') env.KICI_AGENT_SEAL = 'off';
  const runtime = await sealedRuntimeFor(binary, env, deps.runtime);
  try {
    tracked.placement = await placeAgent(
      id,
      mode,
      ls,
      deps.hostEnv,
      deps.users,
      deps.secrets,
      runtime ? [runtime] : [],
    );
  } catch (err) {
    return fail(`cannot prepare the agent's user or work dir: ${(err as Error).message}`, err);
  }
  Object.assign(env, placementEnv(tracked.placement));
  const { user, sandbox } = tracked.placement;
  let launch;
  /** Started provisionally and not yet settled with the spawner. */
  let provisional: AgentChild | undefined;
  // Cgroup dirs of ours exist for it (the spawner could not remove those after a crash).
  let cgroupDirs: boolean;
  try {
    const held = await deps.limits.prepare(id, req.limits);
    cgroupDirs = !!held.procsFiles?.length;
    // The scope's tools find the user manager through these; an agent that was not given them
    // (the default profile) must not reach the manager and start work outside its own limits.
    const added = Object.keys(held.env ?? {}).filter((k) => env[k] === undefined);
    launch = launchCommand({
      binary,
      runtime,
      user,
      sandbox,
      procsFiles: held.procsFiles,
      scope: held.prefix ? { prefix: held.prefix, unset: added } : undefined,
      forkerIsRoot: deps.forkerIsRoot,
    });
    for (const k of added) env[k] = held.env![k]!;
  } catch (err) {
    return fail(`cannot create the agent's cgroup for enforceCgroups: ${(err as Error).message}`, err);
  }
  try {
    // Checked here, not left to the cgroup shell or to exec, so the reason names what is wrong.
    // Synchronous: two system calls cost less than two trips through the thread pool, which a
    // busy host makes long, on every cold start.
    if (statSync(binary).isDirectory()) throw Object.assign(new Error('is a directory'), { code: 'EISDIR' });
    if (launch.file !== binary) accessSync(binary, constants.X_OK);
    const agentLaunch = { file: launch.file, args: launch.args, env, token, ...launch.as };
    // Its record is still being written (req.record): the spawner may start it now if it undoes
    // the start should this process die before the record exists. It can undo what it can remove
    // (the process, its home, its uid claim), not a cgroup of ours.
    const spawnerUndo = req.record && !cgroupDirs ? undoPaths(tracked.placement, deps.users) : undefined;
    if (req.record && !spawnerUndo) await req.record().catch(recordFailed);
    const relayed = deps.spawner?.spawn(agentLaunch, spawnerUndo && { undo: spawnerUndo });
    // Asked once the start is under way, so the record's write runs while the spawner forks; with
    // no spawner to undo it, written before the start below.
    const recorded = spawnerUndo ? req.record!() : undefined;
    recorded?.catch(() => {}); // awaited below; a start that fails first must not leave it unheard
    if (!relayed) {
      await recorded?.catch(recordFailed);
      return await spawnDirect(agentLaunch);
    }
    let child: AgentChild;
    try {
      child = await relayed;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ESPAWNER') throw err;
      // The spawner went away with this request in flight: its agent may have started. Nothing of
      // it may outlive this answer, and the start is made here instead.
      await stopAgentTree(id, undefined, 0);
      await recorded?.catch(recordFailed);
      return await spawnDirect(agentLaunch);
    }
    if (recorded) {
      provisional = child;
      await recorded.catch(async (err: unknown) => {
        await stopAgentTree(id, child.pid, 0);
        recordFailed(err);
      });
      provisional = undefined;
      child.settle?.();
    }
    return child;
  } catch (err) {
    await undo();
    // Undone here, its process stopped and its placement released: not the spawner's to undo (the
    // uid may be claimed again by the time the spawner would).
    provisional?.settle?.();
    if (err instanceof SpawnError) throw err;
    const failure = launchError(binary, err);
    req.onEvent('scaler.failed', failure.message);
    throw failure;
  }
}

/**
 * The sealed copy of the Node this agent would run (the first on its PATH), when the agent is a
 * node script and sealing is not switched off for its label set.
 */
async function sealedRuntimeFor(
  binary: string,
  env: Record<string, string>,
  runtime: SealedRuntime | undefined,
): Promise<string | undefined> {
  if (!runtime || env.KICI_AGENT_SEAL === 'off') return undefined;
  const node = findOnPath('node', env.PATH);
  if (!node || !(await runsOnNode(binary))) return undefined;
  return runtime.for(node);
}

/** The scaler could not write the spawn's record: nothing of the start may remain. */
function recordFailed(err: unknown): never {
  throw new SpawnError('transient', `the spawn's record could not be written: ${errorMessage(err)}`, {
    cause: err,
  });
}

/** What the spawner removes after a provisional agent it killed: its home, then its uid claim. */
function undoPaths(placement: Placement, users: AgentUserPool): string[] {
  const paths: string[] = [];
  if (placement.workDir) paths.push(placement.workDir);
  if (placement.user) paths.push(users.claimPathOf(placement.user.uid));
  return paths;
}
