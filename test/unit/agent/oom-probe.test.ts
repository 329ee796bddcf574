/**
 * OOM reason: the agent reads the OOM-kill counter and the limit of its own memory cgroup (v1
 * memory.oom_control / memory.limit_in_bytes, v2 memory.events / memory.max), at the path
 * /proc/self/cgroup names or, inside a container, at the controller's root. Real files in a temp
 * dir.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { oomMessage, oomProbe } from '../../../src/agent/oom.js';

const made: string[] = [];
afterEach(async () => {
  for (const d of made.splice(0)) await rm(d, { recursive: true, force: true });
});

async function tree(files: Record<string, string>): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'kici-oom-'));
  made.push(root);
  for (const [rel, body] of Object.entries(files)) {
    await mkdir(join(root, rel, '..'), { recursive: true });
    await writeFile(join(root, rel), body);
  }
  return root;
}

describe('agent OOM probe', () => {
  it('v1: reads oom_kill and the limit under the memory controller at the group path', async () => {
    const root = await tree({
      'self-cgroup': '12:pids:/kici/a1\n4:memory:/kici/a1\n0::/kici/a1\n',
      'cg/memory/kici/a1/memory.oom_control': 'oom_kill_disable 0\nunder_oom 0\noom_kill 3\n',
      'cg/memory/kici/a1/memory.limit_in_bytes': String(96 * 2 ** 20) + '\n',
    });
    const p = oomProbe(join(root, 'cg'), join(root, 'self-cgroup'));
    expect(await p.kills()).toBe(3);
    expect(await p.limit()).toBe(96 * 2 ** 20);
  });

  it("answers within the turn, even its first read: a fresh agent's first step does not wait on the thread pool", async () => {
    const root = await tree({
      'self-cgroup': '0::/kici/a3\n',
      'cg/kici/a3/memory.events': 'oom 0\noom_kill 2\n',
    });
    const p = oomProbe(join(root, 'cg'), join(root, 'self-cgroup'));
    let kills: number | undefined;
    const read = p.kills().then((n) => (kills = n));
    // A read through the thread pool settles on a later turn of the event loop, never in microtasks.
    for (let i = 0; i < 3; i++) await Promise.resolve();
    expect(kills).toBe(2);
    await read;
  });

  it('v2: reads memory.events and memory.max; "max" and the v1 no-limit value mean no limit', async () => {
    const root = await tree({
      'self-cgroup': '0::/kici/a2\n',
      'cg/kici/a2/memory.events': 'low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n',
      'cg/kici/a2/memory.max': 'max\n',
    });
    const p = oomProbe(join(root, 'cg'), join(root, 'self-cgroup'));
    expect(await p.kills()).toBe(1);
    expect(await p.limit()).toBeUndefined();
    const v1 = await tree({
      'self-cgroup': '4:memory:/\n',
      'cg/memory/memory.oom_control': 'oom_kill 0\n',
      'cg/memory/memory.limit_in_bytes': '9223372036854771712\n',
    });
    expect(await oomProbe(join(v1, 'cg'), join(v1, 'self-cgroup')).limit()).toBeUndefined();
  });

  it('inside a container the group path is not mounted: the controller root is used', async () => {
    const root = await tree({
      'self-cgroup': '4:memory:/docker/0123abcd\n',
      'cg/memory/memory.oom_control': 'oom_kill 2\n',
    });
    expect(await oomProbe(join(root, 'cg'), join(root, 'self-cgroup')).kills()).toBe(2);
  });

  it('no memory cgroup (or unreadable): undefined, so no step is ever called out of memory', async () => {
    const root = await tree({ 'self-cgroup': '0::/\n' });
    expect(await oomProbe(join(root, 'cg'), join(root, 'self-cgroup')).kills()).toBeUndefined();
    expect(await oomProbe(join(root, 'cg'), join(root, 'missing')).kills()).toBeUndefined();
  });

  it('the message names the step and the limit in MiB', () => {
    expect(oomMessage('build', 64 * 2 ** 20)).toBe(
      `step "build" ran out of memory: the kernel's OOM killer ended it at the agent's memory limit of 64 MiB`,
    );
    expect(oomMessage('build', undefined)).toMatch(/memory limit$/);
  });
});
