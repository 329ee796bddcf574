import { accessSync, constants, existsSync, realpathSync } from 'node:fs';
import { mkdir, rm, stat } from 'node:fs/promises';
import { delimiter, dirname, isAbsolute, join, relative, resolve } from 'node:path';
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
  const keep = sandboxed ? installsToKeep([ls.binaryPath, findOnPath('node', hostEnv.PATH)], hide) : [];
  return {
    user,
    workDir,
    sandbox: sandboxed ? bwrapArgs({ workDir, hide, keep, dropCaps: !user }) : undefined,
  };
}

/**
 * The install roots (nearest ancestor with a package.json, else the file's own dir) of the agent
 * binary and of node, when the sandbox's private /tmp would cover them: an agent installed under
 * /tmp (a CI checkout, say) must still start. A root inside a hidden dir stays hidden, and hidden
 * dirs inside a kept root are covered again after it (see bwrapArgs).
 */
export function installsToKeep(files: (string | undefined)[], hide: string[]): string[] {
  const keep = new Set<string>();
  for (const f of files) {
    if (!f) continue;
    let real: string;
    try {
      real = realpathSync(f);
    } catch {
      continue; // a missing file fails the spawn elsewhere, with its own reason
    }
    if (!isUnder(real, '/tmp')) continue;
    const root = installRoot(real);
    if (hide.some((h) => isUnder(root, h))) continue;
    keep.add(root);
  }
  return [...keep];
}

function installRoot(file: string): string {
  for (let dir = dirname(file); dir !== dirname(dir); dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) return dir;
  }
  return dirname(file);
}

function isUnder(path: string, dir: string): boolean {
  const rel = relative(dir, path);
  return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel));
}

function findOnPath(cmd: string, path: string | undefined): string | undefined {
  for (const dir of (path ?? '').split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, cmd);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here; try the next PATH entry
    }
  }
  return undefined;
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
