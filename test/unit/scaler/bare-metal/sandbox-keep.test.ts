/** The sandbox's private /tmp must not hide the agent's own install when that lives under /tmp. */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installsToKeep } from '../../../../src/scaler/backends/bare-metal/placement.js';
import { bwrapArgs } from '../../../../src/scaler/backends/bare-metal/sandbox.js';

let root: string;
let agent: string;
beforeAll(async () => {
  root = await mkdtemp('/tmp/kici-sbx-keep-');
  await writeFile(join(root, 'package.json'), '{}');
  await mkdir(join(root, 'dist/cli'), { recursive: true });
  agent = join(root, 'dist/cli/agent.js');
  await writeFile(agent, '');
});
afterAll(() => rm(root, { recursive: true, force: true }));

describe('sandbox: installs kept visible', () => {
  it('keeps the package root of an agent installed under /tmp', () => {
    expect(installsToKeep([agent], ['/var/lib/kici/homes'])).toEqual([root]);
  });

  it('keeps nothing outside /tmp (the read-only root shows it), nothing missing, nothing inside a hidden dir', () => {
    expect(installsToKeep(['/bin/sh', undefined, join(root, 'nope.js')], [])).toEqual([]);
    expect(installsToKeep([agent], [root])).toEqual([]);
  });

  it('binds kept installs before the hidden dirs, so a hidden dir inside an install stays hidden', () => {
    const data = join(root, '.kici-data');
    const args = bwrapArgs({ workDir: '/h/a', hide: [data], keep: [root], dropCaps: true });
    const keepAt = args.findIndex((a, i) => a === '--ro-bind' && args[i + 1] === root);
    const hideAt = args.findIndex((a, i) => a === '--tmpfs' && args[i + 1] === data);
    const tmpAt = args.findIndex((a, i) => a === '--tmpfs' && args[i + 1] === '/tmp');
    expect(tmpAt).toBeGreaterThanOrEqual(0);
    expect(keepAt).toBeGreaterThan(tmpAt);
    expect(hideAt).toBeGreaterThan(keepAt);
  });

  it('makes the dirs leading to a kept install traversable, so a per-agent uid can reach it', () => {
    const args = bwrapArgs({ workDir: '/h/a', hide: [], keep: ['/tmp/ci/x/main'], dropCaps: false });
    const dirs = args.flatMap((a, i) => (a === '--dir' ? [[args[i - 2], args[i - 1], args[i + 1]]] : []));
    expect(dirs).toEqual([
      ['--perms', '0755', '/tmp/ci'],
      ['--perms', '0755', '/tmp/ci/x'],
    ]);
    expect(args.indexOf('/tmp/ci/x')).toBeLessThan(args.indexOf('/tmp/ci/x/main'));
  });
});
