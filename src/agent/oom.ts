import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * How many times the kernel's OOM killer struck inside this agent's memory cgroup, so a step that
 * died by SIGKILL can be reported as "ran out of memory" instead of a bare exit code 137.
 * v1: `memory.oom_control` (`oom_kill N`); v2: `memory.events` (`oom_kill N`). Undefined when the
 * agent has no readable memory cgroup (no limit to run out of).
 */
export interface OomProbe {
  kills(): Promise<number | undefined>;
  /** The memory limit in bytes, when one is set. */
  limit(): Promise<number | undefined>;
}

export function oomProbe(root = '/sys/fs/cgroup', selfCgroup = '/proc/self/cgroup'): OomProbe {
  // A process does not change memory cgroup on its own: where to look is worked out once, and at
  // once (a file the kernel generates in memory): on a fresh agent the first job's first step
  // would otherwise wait for a trip through the thread pool.
  let where: { dir: string; v: 1 | 2 }[] | undefined;
  const dirs = () => (where ??= locate());
  const locate = (): { dir: string; v: 1 | 2 }[] => {
    const lines = (readNow(selfCgroup) ?? '').split('\n');
    const out: { dir: string; v: 1 | 2 }[] = [];
    for (const line of lines) {
      const [, ctrls, path] = /^\d+:([^:]*):(.*)$/.exec(line) ?? [];
      if (path === undefined) continue;
      // In a container the group is often mounted at the root of the controller, not at its path.
      if (ctrls!.split(',').includes('memory'))
        out.push({ dir: join(root, 'memory', path), v: 1 }, { dir: join(root, 'memory'), v: 1 });
      if (ctrls === '') out.push({ dir: join(root, path), v: 2 }, { dir: root, v: 2 });
    }
    return out;
  };
  const firstNumber = (file: (d: { dir: string; v: 1 | 2 }) => string, re: RegExp) => {
    for (const d of dirs()) {
      // A controller file that is missing (no such controller, or the group is gone) holds no OOM
      // evidence. Read at once: a cgroup file is generated in memory, and this read sits between a
      // step's start message and its process.
      const text = readNow(file(d));
      const m = text === undefined ? null : re.exec(text);
      if (m) return Number(m[1]);
    }
    return undefined;
  };
  return {
    kills: () =>
      Promise.resolve(
        firstNumber(
          (d) => join(d.dir, d.v === 1 ? 'memory.oom_control' : 'memory.events'),
          /^oom_kill (\d+)$/m,
        ),
      ),
    limit() {
      const n = firstNumber(
        (d) => join(d.dir, d.v === 1 ? 'memory.limit_in_bytes' : 'memory.max'),
        /^(\d+)\s*$/,
      );
      // v1 reports "no limit" as a huge page-aligned number.
      return Promise.resolve(n !== undefined && n < 2 ** 62 ? n : undefined);
    },
  };
}

function readNow(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

/** The agent's own probe: every job of this process reads the same cgroup. */
let shared: OomProbe | undefined;
export function agentOomProbe(): OomProbe {
  return (shared ??= oomProbe());
}

/** The job reason for a step the OOM killer ended. */
export function oomMessage(stepName: string, limitBytes: number | undefined): string {
  const limit = limitBytes ? ` of ${Math.round(limitBytes / 2 ** 20)} MiB` : '';
  return `step "${stepName}" ran out of memory: the kernel's OOM killer ended it at the agent's memory limit${limit}`;
}
