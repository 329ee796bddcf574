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

  it("covers the orchestrator's home, shows an install inside it again, and blanks secret files last", () => {
    const home = '/home/kici';
    const args = bwrapArgs({
      workDir: '/h/a',
      hide: ['/h', '/home/kici/.local/state/kici'],
      cover: [home, '/'],
      hideFiles: ['/etc/kici/orchestrator/admin-token'],
      keep: ['/home/kici/opt/kici'],
      dropCaps: true,
    });
    const at = (...xs: string[]) => args.findIndex((_, i) => xs.every((x, j) => args[i + j] === x));
    expect(at('--tmpfs', home)).toBeGreaterThan(0);
    // '/' is never covered: the read-only root is what the sandbox runs on.
    expect(at('--tmpfs', '/')).toBe(-1);
    expect(at('--perms', '0755', '--dir', '/home/kici/opt')).toBeGreaterThan(at('--tmpfs', home));
    expect(at('--ro-bind', '/home/kici/opt/kici')).toBeGreaterThan(at('--tmpfs', home));
    expect(at('--tmpfs', '/home/kici/.local/state/kici')).toBeGreaterThan(
      at('--ro-bind', '/home/kici/opt/kici'),
    );
    expect(at('--ro-bind', '/dev/null', '/etc/kici/orchestrator/admin-token')).toBeGreaterThan(
      at('--ro-bind', '/home/kici/opt/kici'),
    );
    // A file already under a covered or hidden dir needs no blanking (bwrap would make its path).
    const inHome = bwrapArgs({
      workDir: '/h/a',
      hide: ['/data'],
      cover: [home],
      hideFiles: [`${home}/.config/kici/admin-token`, '/data/x', '/etc/tls.key'],
      dropCaps: true,
    });
    expect(inHome.filter((a, i) => inHome[i - 1] === '/dev/null')).toEqual(['/etc/tls.key']);
  });

  it('keeps an install inside a covered home, not one inside a hidden dir', () => {
    expect(installsToKeep([agent], [], [root])).toEqual([root]);
    expect(installsToKeep([agent], [root], [root])).toEqual([]);
  });
});
