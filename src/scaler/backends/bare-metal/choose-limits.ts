import { execFile } from 'node:child_process';
import { access, constants, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { CgroupDriver } from './cgroup-driver.js';
import {
  ADVISORY_FIX,
  CgroupfsLimits,
  NoLimits,
  UserScopeLimits,
  type AgentLimits,
  type UserScopeTools,
} from './agent-limits.js';
import { detectCgroups } from './cgroups.js';
import { onPath } from './host-probe.js';

/** What the chooser asks of the host; each answer can be injected by a test. */
export interface LimitsProbes {
  isRoot(): boolean;
  /** A cgroup tree this process can write, or undefined. */
  cgroupfs(): Promise<CgroupDriver | undefined>;
  /** The user service manager's tools when `systemd-run --user --scope` works, else why not. */
  userScope(): Promise<UserScopeTools | { unavailable: string }>;
}

/** Where a scaler's limits come from, in order of preference; see docs/limits.md. */
export async function chooseAgentLimits(requested: boolean, probes: LimitsProbes): Promise<AgentLimits> {
  if (!requested) return new NoLimits('off');
  const root = probes.isRoot();
  if (root) {
    const driver = await probes.cgroupfs();
    if (driver) return new CgroupfsLimits(driver);
  }
  const scope = await probes.userScope();
  if (!('unavailable' in scope)) return new UserScopeLimits(scope);
  const why = root
    ? `no writable cgroup tree under /sys/fs/cgroup, and ${scope.unavailable}`
    : `the orchestrator is not root, and ${scope.unavailable}`;
  return new NoLimits('advisory', {
    problem: `enforceCgroups is set but agents start without CPU, memory or task limits (${why}); the limits are advisory`,
    fix: ADVISORY_FIX,
  });
}

const PROBE_TIMEOUT_MS = 10_000;

/** The probes against this host, with the orchestrator's environment. */
export function hostLimitsProbes(env: NodeJS.ProcessEnv, cgroupRoot = '/sys/fs/cgroup'): LimitsProbes {
  return {
    isRoot: () => process.getuid?.() === 0,
    cgroupfs: () => writableCgroups(cgroupRoot),
    userScope: () => probeUserScope(env, cgroupRoot),
  };
}

const LIMIT_CONTROLLERS = ['memory', 'cpu', 'pids'] as const;

/** The detected cgroup tree, when this process may create groups in it (a read-only mount may not). */
export async function writableCgroups(root = '/sys/fs/cgroup'): Promise<CgroupDriver | undefined> {
  const driver = await detectCgroups(root);
  if (!driver) return undefined;
  const where = driver.version === 2 ? root : join(root, 'memory');
  return access(where, constants.W_OK).then(
    () => driver,
    () => undefined,
  );
}

/**
 * A user manager answers when its private socket exists and a dry run of the very command an agent
 * starts under (a scope that runs `true`) succeeds; the dry run also proves the bus is reachable
 * with the environment given.
 */
export async function probeUserScope(
  env: NodeJS.ProcessEnv,
  cgroupRoot = '/sys/fs/cgroup',
): Promise<UserScopeTools | { unavailable: string }> {
  const systemdRun = onPath('systemd-run', env.PATH);
  const systemctl = onPath('systemctl', env.PATH);
  if (!systemdRun || !systemctl)
    return { unavailable: 'systemd-run and systemctl are not both on PATH (no systemd user manager)' };
  const uid = process.getuid?.() ?? 0;
  const runtimeDir = env.XDG_RUNTIME_DIR || `/run/user/${uid}`;
  const socket = join(runtimeDir, 'systemd/private');
  const present = await access(socket).then(
    () => true,
    () => false,
  );
  if (!present)
    return { unavailable: `no systemd user manager answers for uid ${uid} (${socket} is missing)` };
  // systemd accepts the properties whatever the host, and applies only what its tree allows: a user
  // manager holds limits only on the unified (v2) tree, with the controllers delegated to it. The
  // root's cgroup.controllers exists, world-readable, only on that tree: a failed read is the
  // answer (v1 or no cgroupfs), and it reaches the operator as the reason below.
  if ((await readFile(join(cgroupRoot, 'cgroup.controllers'), 'utf8').catch(() => undefined)) === undefined)
    return {
      unavailable: `${cgroupRoot} is not a unified cgroup v2 tree, and a systemd user manager can hold limits only there`,
    };
  const delegated = await readFile(
    join(cgroupRoot, `user.slice/user-${uid}.slice/user@${uid}.service/cgroup.controllers`),
    'utf8',
  ).then(
    (text) => text.split(/\s+/),
    // A layout of its own: the dry run below is all there is to go on.
    () => [...LIMIT_CONTROLLERS],
  );
  const missing = LIMIT_CONTROLLERS.filter((c) => !delegated.includes(c));
  if (missing.length === LIMIT_CONTROLLERS.length)
    return {
      unavailable: `the systemd user manager of uid ${uid} has none of the memory, cpu and pids controllers delegated to it`,
    };
  const busEnv: Record<string, string> = { XDG_RUNTIME_DIR: runtimeDir };
  if (env.DBUS_SESSION_BUS_ADDRESS) busEnv.DBUS_SESSION_BUS_ADDRESS = env.DBUS_SESSION_BUS_ADDRESS;
  const failure = await new Promise<string | undefined>((done) => {
    execFile(
      systemdRun,
      ['--user', '--scope', '--quiet', '--collect', '-p', 'TasksMax=16', '--', 'true'],
      { env: { PATH: env.PATH ?? '/usr/bin:/bin', ...busEnv }, timeout: PROBE_TIMEOUT_MS },
      (err, _out, stderr) => done(err ? String(stderr).trim().split('\n')[0] || err.message : undefined),
    );
  });
  if (failure !== undefined) return { unavailable: `systemd-run --user --scope fails here (${failure})` };
  return { systemdRun, systemctl, busEnv, missingControllers: missing };
}
