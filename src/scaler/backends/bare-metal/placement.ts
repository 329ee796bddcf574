import { accessSync, constants, existsSync, realpathSync } from 'node:fs';
import { mkdir, rm, stat } from 'node:fs/promises';
import { delimiter, dirname, isAbsolute, join, relative, resolve } from 'node:path';
import type { LabelSetConfig } from '../../../config/index.js';
import { modeParts, type ConfinementMode } from './confinement.js';
import { bwrapArgs } from './sandbox.js';
import { killUid } from './proc-uids.js';
import {
  AGENT_UID_COUNT,
  AGENT_UID_FIRST,
  ensureHomesRoot,
  type AgentUser,
  type AgentUserPool,
} from './users.js';

/**
 * Where one agent lives on the host besides its process: its uid (per-agent users), its own work
 * dir, and the sandbox around it. Trusted host mode has none of these.
 */
export interface Placement {
  user?: AgentUser | undefined;
  workDir?: string | undefined;
  sandbox?: string[] | undefined;
}

/** What the orchestrator keeps that no job may read: hidden in the sandbox. */
export interface SecretPaths {
  /** The data dir (database, instance id). */
  dataDir?: string | undefined;
  /** Single files: the bootstrap admin token, the TLS key. Only existing ones are hidden. */
  files?: readonly string[];
  /** The orchestrator user's home (its config dir holds the default admin token file). */
  home?: string | undefined;
}

export async function placeAgent(
  agentId: string,
  mode: ConfinementMode,
  ls: LabelSetConfig,
  hostEnv: NodeJS.ProcessEnv,
  users: AgentUserPool,
  secrets: SecretPaths,
  /** More host paths the agent needs to start (the sealed Node copy), kept visible in the sandbox. */
  needs: string[] = [],
): Promise<Placement> {
  const parts = modeParts(mode);
  const sandboxed = parts.sandbox;
  if (!parts.user && !sandboxed) return {};
  let user: AgentUser | undefined;
  let workDir: string;
  if (parts.user) {
    user = await users.acquire(agentId);
    workDir = user.home;
  } else {
    workDir = users.homeOf(agentId);
    await ensureHomesRoot(users.root);
    await mkdir(workDir, { recursive: true, mode: 0o700 });
  }
  if (!sandboxed) return { user, workDir };
  // Other agents' homes and the orchestrator's data (tokens, database) are hidden, not just unwritable.
  const hide = [users.root, ...(secrets.dataDir ? [resolve(secrets.dataDir)] : [])];
  const cover = secrets.home && existsSync(secrets.home) ? [resolve(secrets.home)] : [];
  const hideFiles = (secrets.files ?? []).map((f) => resolve(f)).filter((f) => existsSync(f));
  const keep = installsToKeep([ls.binaryPath, findOnPath('node', hostEnv.PATH), ...needs], hide, cover);
  return {
    user,
    workDir,
    sandbox: bwrapArgs({ workDir, hide, cover, hideFiles, keep, dropCaps: !user }),
  };
}

/**
 * The install roots (nearest ancestor with a package.json, else the file's own dir) of the agent
 * binary and of node, when the sandbox's private /tmp or a covered dir (the orchestrator's home)
 * would hide them: an agent installed under /tmp (a CI checkout, say) or in the orchestrator's home
 * must still start. A root inside a hidden dir stays hidden, and hidden dirs inside a kept root are
 * covered again after it (see bwrapArgs).
 */
export function installsToKeep(
  files: (string | undefined)[],
  hide: string[],
  cover: readonly string[] = [],
): string[] {
  const keep = new Set<string>();
  for (const f of files) {
    if (!f) continue;
    let real: string;
    try {
      real = realpathSync(f);
    } catch {
      continue; // a missing file fails the spawn elsewhere, with its own reason
    }
    if (!['/tmp', ...cover].some((c) => isUnder(real, c))) continue;
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

export function findOnPath(cmd: string, path: string | undefined): string | undefined {
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
