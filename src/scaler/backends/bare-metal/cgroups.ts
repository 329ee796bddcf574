import { access, mkdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { constants } from 'node:fs';
import { join } from 'node:path';
import type { EffectiveLimits } from '../../types.js';
import type { CgroupDriver } from './cgroup-driver.js';

/**
 * Resource limits for bare-metal agents through the cgroup filesystem directly (no systemd needed).
 * Works on cgroup v2 (unified) and v1 (one hierarchy per controller), since hosts have either.
 * The driver's interface lives in ../deps.ts with the other host-tool slots.
 */
export type { CgroupDriver };

export const AGENT_PIDS_LIMIT = 4096;
const CPU_PERIOD_US = 100_000;

export async function detectCgroups(
  root = '/sys/fs/cgroup',
  parent = 'kici',
): Promise<CgroupDriver | undefined> {
  try {
    const controllers = (await readFile(join(root, 'cgroup.controllers'), 'utf8')).split(/\s+/);
    if (controllers.includes('memory') && controllers.includes('cpu')) return new CgroupV2(root, parent);
  } catch {
    // not a unified hierarchy at the root
  }
  try {
    await Promise.all(['memory', 'cpu', 'pids'].map((c) => access(join(root, c, 'cgroup.procs'))));
    const has = (p: string) =>
      access(join(root, p, 'cgroup.procs')).then(
        () => true,
        () => false,
      );
    // Hybrid hosts (v1 controllers + an empty v2 tree at `unified`): the v2 group adds cgroup.kill.
    return new CgroupV1(root, parent, await has('freezer'), await has('unified'));
  } catch {
    return undefined;
  }
}

class CgroupV2 implements CgroupDriver {
  readonly version = 2 as const;
  constructor(
    private readonly root: string,
    private readonly parent: string,
  ) {}

  private dir(agentId: string): string {
    return join(this.root, this.parent, agentId);
  }

  async create(agentId: string, limits: EffectiveLimits | undefined): Promise<string[]> {
    const parentDir = join(this.root, this.parent);
    await mkdir(parentDir, { recursive: true });
    // Controllers must be delegated down the tree before a child can use them. The root may refuse
    // (already delegated, or not ours to write): harmless, because the parent's write below is not
    // caught and fails loudly if the controllers are really unavailable.
    await writeFile(join(this.root, 'cgroup.subtree_control'), '+memory +cpu +pids').catch(() => {});
    await writeFile(join(parentDir, 'cgroup.subtree_control'), '+memory +cpu +pids');
    const dir = this.dir(agentId);
    await mkdir(dir, { recursive: true });
    if (limits?.memBytes) {
      await writeFile(join(dir, 'memory.max'), String(limits.memBytes));
      // Absent when the kernel has no swap accounting; then there is no swap to bound.
      await writeFile(join(dir, 'memory.swap.max'), '0').catch(() => {});
    }
    if (limits?.cpus)
      await writeFile(
        join(dir, 'cpu.max'),
        `${Math.max(1000, Math.round(limits.cpus * CPU_PERIOD_US))} ${CPU_PERIOD_US}`,
      );
    await writeFile(join(dir, 'pids.max'), String(AGENT_PIDS_LIMIT));
    return [join(dir, 'cgroup.procs')];
  }

  async remove(agentId: string): Promise<void> {
    const dir = this.dir(agentId);
    // cgroup.kill needs Linux 5.14; on older kernels the listed processes are killed one by one.
    const kill = async () => {
      // Absent before Linux 5.14: killListed below does the same work one pid at a time.
      await writeFile(join(dir, 'cgroup.kill'), '1').catch(() => {});
      await killListed(join(dir, 'cgroup.procs'));
    };
    await kill();
    await removeWhenEmpty(dir, kill);
  }
}

class CgroupV1 implements CgroupDriver {
  readonly version = 1 as const;
  private static readonly controllers = ['memory', 'cpu', 'pids'] as const;
  constructor(
    private readonly root: string,
    private readonly parent: string,
    /** v1 freezer: stop every task first, so none can fork while it is being killed. */
    private readonly freezer = false,
    /** The v2 tree of a hybrid host: its cgroup.kill ends the whole group in one write. */
    private readonly unified = false,
  ) {}

  private dir(controller: string, agentId: string): string {
    return join(this.root, controller, this.parent, agentId);
  }

  private get groups(): string[] {
    return [
      ...CgroupV1.controllers,
      ...(this.freezer ? ['freezer'] : []),
      ...(this.unified ? ['unified'] : []),
    ];
  }

  async create(agentId: string, limits: EffectiveLimits | undefined): Promise<string[]> {
    for (const c of this.groups) await mkdir(this.dir(c, agentId), { recursive: true });
    if (limits?.memBytes) {
      await writeFile(join(this.dir('memory', agentId), 'memory.limit_in_bytes'), String(limits.memBytes));
      // Without this the group could swap past its limit where swap accounting is on; where it is
      // off the file does not exist, and there is no swap to bound. Only that absence is let pass
      // (opened without creating it): a refused write means the limit would not hold.
      await writeFile(
        join(this.dir('memory', agentId), 'memory.memsw.limit_in_bytes'),
        String(limits.memBytes),
        {
          flag: constants.O_WRONLY | constants.O_TRUNC,
        },
      ).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOENT') throw err;
      });
    }
    if (limits?.cpus) {
      const cpu = this.dir('cpu', agentId);
      await writeFile(join(cpu, 'cpu.cfs_period_us'), String(CPU_PERIOD_US));
      await writeFile(
        join(cpu, 'cpu.cfs_quota_us'),
        String(Math.max(1000, Math.round(limits.cpus * CPU_PERIOD_US))),
      );
    }
    await writeFile(join(this.dir('pids', agentId), 'pids.max'), String(AGENT_PIDS_LIMIT));
    return this.groups.map((c) => join(this.dir(c, agentId), 'cgroup.procs'));
  }

  async remove(agentId: string): Promise<void> {
    if (this.unified) {
      // Absent before Linux 5.14: the freezer and the per-pid kills below do the same work.
      await writeFile(join(this.dir('unified', agentId), 'cgroup.kill'), '1').catch(() => {});
    }
    if (this.freezer) await freezeAndKill(this.dir('freezer', agentId));
    // v1 has no cgroup.kill: signal whatever is still listed, every round, until the groups are gone.
    const killAll = async () => {
      for (const c of this.groups) await killListed(join(this.dir(c, agentId), 'cgroup.procs'));
    };
    await killAll();
    for (const c of this.groups) await removeWhenEmpty(this.dir(c, agentId), killAll);
  }
}

/**
 * Freeze the group, SIGKILL every task while none can fork, then thaw so the kills are delivered.
 * A group that is already gone is fine.
 */
async function freezeAndKill(dir: string): Promise<void> {
  const state = join(dir, 'freezer.state');
  if (
    !(await writeFile(state, 'FROZEN').then(
      () => true,
      () => false,
    ))
  )
    return;
  for (let i = 0; i < 100; i++) {
    const now = (await readFile(state, 'utf8').catch(() => 'FROZEN')).trim();
    if (now === 'FROZEN') break;
    await new Promise((r) => setTimeout(r, 10));
  }
  await killListed(join(dir, 'tasks'));
  // Every task was killed while frozen; a group already removed has no state to thaw.
  await writeFile(state, 'THAWED').catch(() => {});
}

/** SIGKILL every process a `cgroup.procs` file lists. */
async function killListed(procsFile: string): Promise<void> {
  const procs = await readFile(procsFile, 'utf8').catch(() => '');
  for (const pid of procs.split('\n').filter(Boolean)) {
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

/**
 * rmdir fails with EBUSY while the kernel still tears processes down (an OOM kill can take a while
 * on a busy host); keep killing stragglers and retrying for up to 10 s before giving up.
 */
async function removeWhenEmpty(dir: string, killStragglers?: () => Promise<void>): Promise<void> {
  for (let i = 0; i < 200; i++) {
    try {
      await rmdir(dir);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      await killStragglers?.();
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new Error(`cgroup ${dir} is still busy after 10 s`);
}
