import { execFile } from 'node:child_process';
import type { EffectiveLimits } from '../../types.js';
import type { CgroupDriver } from './cgroup-driver.js';
import { scopeCommand, scopeUnitName } from './scope-properties.js';

/**
 * How a bare-metal scaler applies its agents' CPU, memory and task limits. Chosen once, when the
 * scaler is built, from what this host lets the orchestrator do (see choose-limits.ts); the backend
 * only asks it to prepare a launch and to release an agent, whichever way it works.
 */
export interface AgentLimits {
  /** Said in the log, `diagnose` and `scaler validate`: which mechanism holds the limits. */
  readonly strategy: 'cgroupfs' | 'systemd-user-scope' | 'advisory' | 'off';
  /** Limits are enforced by the kernel (not advisory, not switched off). */
  readonly enforced: boolean;
  /** What the operator is told once: why the limits are not enforced, and how to get them. */
  readonly advisory?: { problem: string; fix: string } | undefined;
  /** One line for status views: the mechanism and what it reaches. */
  describe(): string;
  /** What one agent's launch needs: cgroup files to join first, or a command to start it under. */
  prepare(agentId: string, limits: EffectiveLimits | undefined): Promise<LimitsLaunch>;
  /** End whatever is left of the agent's group and remove the group. */
  release(agentId: string): Promise<void>;
}

export interface LimitsLaunch {
  /** `cgroup.procs` files the launch shell joins while still privileged. */
  procsFiles?: string[];
  /** A command the agent's command line is appended to (it ends with its own `--`). */
  prefix?: string[];
  /** Variables the prefix needs to find its service manager; not passed on to the agent. */
  env?: Record<string, string>;
}

/** Today's writer: the orchestrator (root) makes and removes each agent's group itself. */
export class CgroupfsLimits implements AgentLimits {
  readonly strategy = 'cgroupfs' as const;
  readonly enforced = true;
  constructor(private readonly driver: CgroupDriver) {}
  describe(): string {
    return `enforced through the cgroup v${this.driver.version} filesystem (the orchestrator writes each agent's group)`;
  }
  async prepare(agentId: string, limits: EffectiveLimits | undefined): Promise<LimitsLaunch> {
    return { procsFiles: await this.driver.create(agentId, limits) };
  }
  release(agentId: string): Promise<void> {
    return this.driver.remove(agentId);
  }
}

export interface UserScopeTools {
  systemdRun: string;
  systemctl: string;
  /** XDG_RUNTIME_DIR (and the session bus address when set): how both tools find the manager. */
  busEnv: Record<string, string>;
  /** Limit controllers (memory, cpu, pids) not delegated to the manager: those limits do not hold. */
  missingControllers?: readonly string[];
}

/**
 * No root needed: each agent starts in a transient scope of the orchestrator user's own service
 * manager, which writes the limits into the cgroup tree delegated to it.
 */
export class UserScopeLimits implements AgentLimits {
  readonly strategy = 'systemd-user-scope' as const;
  readonly enforced = true;
  readonly advisory: { problem: string; fix: string } | undefined;
  constructor(private readonly tools: UserScopeTools) {
    const missing = tools.missingControllers ?? [];
    this.advisory = missing.length
      ? {
          problem: `the systemd user manager has no ${missing.join(', ')} controller delegated to it, so agents' ${missing.map((c) => CONTROLLER_LIMIT[c] ?? c).join(' and ')} limits are advisory`,
          fix: 'add `Delegate=memory cpu pids` to a drop-in for user@.service, then restart the user manager (or reboot)',
        }
      : undefined;
  }
  describe(): string {
    return `enforced through a systemd user scope per agent (systemd-run --user --scope)${this.advisory ? `, except: ${this.advisory.problem}` : ''}`;
  }
  async prepare(agentId: string, limits: EffectiveLimits | undefined): Promise<LimitsLaunch> {
    return { prefix: scopeCommand(this.tools.systemdRun, agentId, limits), env: this.tools.busEnv };
  }
  /**
   * The process group is signalled first by the backend; this reaches what left it (a setsid
   * daemon) but stayed in the scope. A scope that is already gone (collected when its last process
   * ended) is the normal case, not a failure.
   */
  async release(agentId: string): Promise<void> {
    const unit = scopeUnitName(agentId);
    const kill = await this.systemctl(['kill', '--signal=SIGKILL', unit]);
    if (kill && !notLoaded(kill)) throw new Error(`systemctl --user kill ${unit}: ${kill}`);
    const stop = await this.systemctl(['stop', unit]);
    if (stop && !notLoaded(stop)) throw new Error(`systemctl --user stop ${unit}: ${stop}`);
  }
  /** Runs `systemctl --user …`; resolves to its error text, or undefined when it succeeded. */
  private systemctl(args: string[]): Promise<string | undefined> {
    return new Promise((done) => {
      execFile(
        this.tools.systemctl,
        ['--user', ...args],
        { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...this.tools.busEnv }, timeout: 10_000 },
        (err, _out, stderr) => done(err ? String(stderr).trim().split('\n')[0] || err.message : undefined),
      );
    });
  }
}

const CONTROLLER_LIMIT: Record<string, string> = { memory: 'memory', cpu: 'CPU', pids: 'task' };

function notLoaded(message: string): boolean {
  return /not loaded|not found|does not exist/i.test(message);
}

/** Nothing to prepare or release: `off` when not asked for, `advisory` when asked but impossible here. */
export class NoLimits implements AgentLimits {
  readonly enforced = false;
  constructor(
    readonly strategy: 'advisory' | 'off',
    readonly advisory?: { problem: string; fix: string },
  ) {}
  describe(): string {
    return this.advisory
      ? this.advisory.problem
      : 'not enforced (enforceCgroups is off): agents run without CPU, memory or task limits';
  }
  async prepare(): Promise<LimitsLaunch> {
    return {};
  }
  async release(): Promise<void> {}
}

/**
 * For a backend built without a chosen strategy (tests, embedders): the given cgroup driver, or
 * advisory limits when they were asked for and no driver was given.
 */
export function limitsFromOptions(requested: boolean, cgroups: CgroupDriver | undefined): AgentLimits {
  if (!requested) return new NoLimits('off');
  if (cgroups) return new CgroupfsLimits(cgroups);
  return new NoLimits('advisory', {
    problem: 'enforceCgroups is set but no way to enforce limits was given; the limits are advisory',
    fix: ADVISORY_FIX,
  });
}

/** How an operator gets real limits on a host where none could be enforced. */
export const ADVISORY_FIX =
  'run the orchestrator as root, or give its user a systemd user manager (`loginctl enable-linger <user>`, then start the orchestrator with XDG_RUNTIME_DIR set) so each agent runs in a limited `systemd-run --user --scope`';
