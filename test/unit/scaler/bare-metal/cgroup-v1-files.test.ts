/**
 * The cgroup v1 driver writes an agent's limits into its groups' files: on a tree of real files in
 * a temporary directory laid out as a v1 host's (one hierarchy per controller), so the writes can be
 * read back. The swap bound (memory.memsw.limit_in_bytes) exists only where swap accounting is on:
 * its absence is let pass, any other refusal fails the create, since the limit would not hold.
 */
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { detectCgroups } from '../../../../src/scaler/backends/bare-metal/cgroups.js';

const made: string[] = [];
afterEach(async () => {
  for (const d of made.splice(0)) await rm(d, { recursive: true, force: true });
});

/** A v1 layout: memory, cpu and pids hierarchies, each with its cgroup.procs. */
async function v1Root(): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'kici-cg1-'));
  made.push(root);
  for (const c of ['memory', 'cpu', 'pids']) {
    await mkdir(join(root, c), { recursive: true });
    await writeFile(join(root, c, 'cgroup.procs'), '');
  }
  return root;
}

const limits = { memBytes: 64 * 2 ** 20, cpus: 1 } as never;

describe('cgroup v1 limits', () => {
  it('without swap accounting (no memsw file): the memory limit is written and no memsw file is made', async () => {
    const root = await v1Root();
    const driver = await detectCgroups(root, 'kici');
    expect(driver?.version).toBe(1);
    await driver!.create('a1', limits);
    const group = join(root, 'memory', 'kici', 'a1');
    expect(await readFile(join(group, 'memory.limit_in_bytes'), 'utf8')).toBe(String(64 * 2 ** 20));
    await expect(stat(join(group, 'memory.memsw.limit_in_bytes'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('with swap accounting: the swap bound is written beside the limit', async () => {
    const root = await v1Root();
    const group = join(root, 'memory', 'kici', 'a2');
    await mkdir(group, { recursive: true });
    await writeFile(join(group, 'memory.memsw.limit_in_bytes'), '9223372036854771712');
    const driver = await detectCgroups(root, 'kici');
    await driver!.create('a2', limits);
    expect(await readFile(join(group, 'memory.memsw.limit_in_bytes'), 'utf8')).toBe(String(64 * 2 ** 20));
  });

  it('a swap bound the host refuses fails the create, naming the file', async () => {
    const root = await v1Root();
    const group = join(root, 'memory', 'kici', 'a3');
    // A directory where the file should be: the write is refused (EISDIR), not missing.
    await mkdir(join(group, 'memory.memsw.limit_in_bytes'), { recursive: true });
    const driver = await detectCgroups(root, 'kici');
    await expect(driver!.create('a3', limits)).rejects.toThrow(/memory\.memsw\.limit_in_bytes/);
  });
});
