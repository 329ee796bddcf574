import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { launchCommand } from '../../../../src/scaler/backends/bare-metal/launch.js';
import { runsOnNode, SealedRuntime } from '../../../../src/scaler/backends/bare-metal/sealed-runtime.js';

const dirs: string[] = [];
const temp = () => {
  const d = mkdtempSync(join(tmpdir(), 'kici-sealed-rt-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe.runIf(process.platform === 'linux')('the sealed Node copy for bare-metal agents', () => {
  it('is execute-only in a traversable dir, runs like the original, and is reused after a restart', async () => {
    const base = temp();
    const warnings: string[] = [];
    const file = await new SealedRuntime((m) => warnings.push(m), base).for(process.execPath);
    expect(warnings).toEqual([]);
    expect(file).toMatch(new RegExp(`^${base}/kici-sealed-node-\\d+-[0-9a-f]{16}/node$`));
    expect(statSync(file!).mode & 0o7777).toBe(0o111);
    expect(statSync(join(file!, '..')).mode & 0o7777).toBe(0o711);
    expect(execFileSync(file!, ['--version'], { encoding: 'utf8' }).trim()).toBe(process.version);
    // A second orchestrator (or a restart) finds the same copy instead of adding another.
    const again = await new SealedRuntime(() => {}, base).for(process.execPath);
    expect(again).toBe(file);
    expect(statSync(again!).ino).toBe(statSync(file!).ino);
  });

  // Root only: only root can give the source binary to another uid, and only root's copy keeps it.
  it.runIf(process.getuid?.() === 0)(
    'a source binary owned by another uid: the copy is still the orchestrator’s, made once and reused',
    async () => {
      const src = join(temp(), 'node');
      copyFileSync(process.execPath, src);
      chownSync(src, 64_998, 64_998);
      const base = temp();
      const rt = new SealedRuntime(() => {}, base);
      const file = await rt.for(src);
      expect(file).toBeDefined();
      const made = statSync(file!);
      expect([made.uid, made.gid, made.mode & 0o7777]).toEqual([0, process.getgid!(), 0o111]);
      // Taken as its own from then on: the same file, in this process and after a restart.
      expect(await rt.for(src)).toBe(file);
      expect(await new SealedRuntime(() => {}, base).for(src)).toBe(file);
      expect(statSync(file!).ino).toBe(made.ino);
    },
  );

  it('never uses a dir at its name that is not its own 0711 dir: agents then seal themselves', async () => {
    const base = temp();
    const first = await new SealedRuntime(() => {}, base).for(process.execPath);
    const dir = join(first!, '..');
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir);
    chmodSync(dir, 0o777);
    writeFileSync(join(dir, 'node'), '#!/bin/sh\necho planted\n', { mode: 0o111 });
    const warnings: string[] = [];
    expect(await new SealedRuntime((m) => warnings.push(m), base).for(process.execPath)).toBeUndefined();
    expect(warnings).toEqual([
      expect.stringMatching(/^agents will copy Node to seal themselves: .* not this user's 0711 dir$/),
    ]);
  });

  it('runs only a node script through the copy', async () => {
    const d = temp();
    const script = (name: string, body: string) => {
      writeFileSync(join(d, name), body, { mode: 0o755 });
      return join(d, name);
    };
    expect(await runsOnNode(script('a', '#!/usr/bin/env node\nconsole.log(1)\n'))).toBe(true);
    expect(await runsOnNode(script('b', '#!/opt/node/bin/node\n'))).toBe(true);
    expect(await runsOnNode(script('c', '#!/bin/sh\nexec node x\n'))).toBe(false);
    expect(await runsOnNode(script('d', '#!/usr/bin/env -S node --inspect\n'))).toBe(false);
    expect(await runsOnNode(join(d, 'missing'))).toBe(false);
    expect(launchCommand({ binary: '/opt/agent.js', runtime: '/tmp/rt/node' })).toEqual({
      file: '/tmp/rt/node',
      args: ['/opt/agent.js'],
    });
  });

  // Root only: it switches to a uid outside the agents' range, so no pool on the host is touched.
  // Both launches: setpriv switching the uid (any orchestrator), and the forker switching it (root).
  it.runIf(process.getuid?.() === 0).each([false, true])(
    'an agent started through the copy under its own uid is sealed by its first exec, with no capability, group or new privilege (forker switches uid: %s)',
    async (forkerIsRoot) => {
      const base = temp();
      chmodSync(base, 0o755);
      const runtime = await new SealedRuntime(() => {}, base).for(process.execPath);
      const d = temp();
      chmodSync(d, 0o755);
      const probe = join(d, 'probe.js');
      writeFileSync(
        probe,
        [
          '#!/usr/bin/env node',
          "const fs = require('node:fs');",
          "const status = fs.readFileSync('/proc/self/status', 'utf8');",
          "const field = (k) => status.split('\\n').find((l) => l.startsWith(k + ':')).split(':')[1].trim();",
          'console.log(JSON.stringify({ uid: process.getuid(), gid: process.getgid(), groups: field("Groups"),',
          '  environOwner: fs.statSync("/proc/self/environ").uid,',
          '  capEff: field("CapEff"), capAmb: field("CapAmb"), capInh: field("CapInh"), nnp: field("NoNewPrivs") }));',
        ].join('\n'),
        { mode: 0o755 },
      );
      const uid = 64_999;
      const launch = launchCommand({
        binary: probe,
        runtime,
        user: { uid, gid: uid, home: d },
        forkerIsRoot,
      });
      // The shorter launch is the forker's own switch: no `env` between setpriv and the agent.
      expect(launch.args.includes('env')).toBe(!forkerIsRoot);
      expect(launch.as).toEqual(forkerIsRoot ? { uid, gid: uid } : undefined);
      const got = JSON.parse(
        execFileSync(launch.file, launch.args, {
          encoding: 'utf8',
          env: { PATH: '/usr/bin:/bin' },
          ...launch.as,
        }),
      ) as Record<string, unknown>;
      // The /proc entries of a non-dumpable process belong to root: the steps, under the agent's
      // uid, cannot read its memory, and it needed no second boot to get there.
      expect(got).toEqual({
        uid,
        gid: uid,
        groups: '',
        environOwner: 0,
        capEff: '0000000000000000',
        capAmb: '0000000000000000',
        capInh: '0000000000000000',
        nnp: '1',
      });
    },
  );
});
