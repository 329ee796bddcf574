import { mkdir, rm, stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import type { LabelSetConfig } from '../../../config/index.js';
import { bwrapArgs } from './sandbox.js';
import { sandboxRequested } from './tools.js';
import {
  AGENT_UID_COUNT,
  AGENT_UID_FIRST,
  ensureHomesRoot,
  killUid,
  type AgentUser,
  type AgentUserPool,
} from './users.js';

/**
 * Where one agent lives on the host besides its process: its uid (runAsUser: dynamic), its own work
 * dir, and the sandbox around it. Plain process mode has none of these and behaves as before.
 */
export interface Placement {
  user?: AgentUser | undefined;
  workDir?: string | undefined;
  sandbox?: string[] | undefined;
}

export async function placeAgent(
  agentId: string,
  ls: LabelSetConfig,
  hostEnv: NodeJS.ProcessEnv,
  users: AgentUserPool,
  dataDir: string | undefined,
): Promise<Placement> {
  const sandboxed = sandboxRequested(ls, hostEnv);
  if (ls.runAsUser !== 'dynamic' && !sandboxed) return {};
  let user: AgentUser | undefined;
  let workDir: string;
  if (ls.runAsUser === 'dynamic') {
    user = await users.acquire(agentId);
    workDir = user.home;
  } else {
    workDir = users.homeOf(agentId);
    await ensureHomesRoot(users.root);
    await mkdir(workDir, { recursive: true, mode: 0o700 });
  }
  // Other agents' homes and the orchestrator's data (tokens, database) are hidden, not just unwritable.
  const hide = [users.root, ...(dataDir ? [resolve(dataDir)] : [])];
  return { user, workDir, sandbox: sandboxed ? bwrapArgs({ workDir, hide, dropCaps: !user }) : undefined };
}

/** What placement adds to the agent's environment: its work dir as KICI_WORK_DIR and HOME. */
export function placementEnv(p: Placement): Record<string, string> {
  return p.workDir ? { KICI_WORK_DIR: p.workDir, HOME: p.workDir } : {};
}

/** Only uids from our own range are ever killed wholesale. */
export function isAgentUid(uid: number): boolean {
  return uid >= AGENT_UID_FIRST && uid < AGENT_UID_FIRST + AGENT_UID_COUNT;
}

/**
 * Undo a placement: every process still running as the agent's uid (whatever session or group it
 * moved to), then its home and its uid claim. Safe on a partial or empty placement.
 */
export async function unplace(agentId: string, p: Placement, users: AgentUserPool): Promise<void> {
  if (p.user && isAgentUid(p.user.uid)) await killUid(p.user.uid);
  if (p.user) await users.release(agentId, p.user.uid);
  else if (p.workDir) await rm(p.workDir, { recursive: true, force: true });
}

/** An agent's uid and home after a restart, from the uid claim that names it (host-local evidence). */
export async function recoveredPlacement(users: AgentUserPool, agentId: string): Promise<Placement> {
  const uid = await users.uidOf(agentId);
  const home = users.homeOf(agentId);
  if (uid !== undefined) return { user: { uid, gid: uid, home }, workDir: home };
  const exists = await stat(home).then(
    () => true,
    () => false,
  );
  return exists ? { workDir: home } : {};
}
