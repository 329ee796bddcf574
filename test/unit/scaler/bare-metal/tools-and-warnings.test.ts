/**
 * getRequiredTools (every binaryPath executable, node on PATH, bwrap when the sandbox is requested,
 * all fatal), the warnings a bare-metal scaler gives when it is built, and how one agent's command
 * line is composed (cgroup join → bwrap → setpriv → binary).
 */
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { ScalerEntry } from '../../../../src/config/index.js';
import { BareMetalScalerBackend } from '../../../../src/scaler/backends/bare-metal/backend.js';
import { launchCommand } from '../../../../src/scaler/backends/bare-metal/launch.js';
import { bwrapArgs } from '../../../../src/scaler/backends/bare-metal/sandbox.js';
import { bareMetalTools } from '../../../../src/scaler/backends/bare-metal/tools.js';
import { preflightEntry } from '../../../../src/scaler/backends/registry.js';
import { fatalToolError } from '../../../../src/scaler/preflight.js';
import { bareMetal, scalerConfig } from '../../../helpers/scaler-config.js';
import { spawnContext } from '../../../helpers/spawn-context.js';

const entryOf = (input: Record<string, unknown>): ScalerEntry =>
  scalerConfig({ version: 1, scalers: [input] }).scalers[0]!;

const made: string[] = [];
afterEach(async () => {
  for (const d of made.splice(0)) await rm(d, { recursive: true, force: true });
});

async function binDir(names: string[]): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-bm-tools-'));
  made.push(dir);
  for (const n of names) {
    await writeFile(join(dir, n), '#!/bin/sh\n');
    await chmod(join(dir, n), 0o755);
  }
  return dir;
}

describe('bare-metal getRequiredTools', () => {
  it('lists each binaryPath (resolved against the config dir), node, and bwrap only when the sandbox is asked for; all fatal', () => {
    const plain = entryOf(bareMetal('bm', [{ labels: ['a'], binaryPath: 'bin/agent' }, ['b']]));
    const tools = bareMetalTools(plain, '/etc/kici', {});
    expect(tools.map((t) => t.find)).toEqual([
      { kind: 'path', path: '/etc/kici/bin/agent' },
      { kind: 'path', path: '/opt/kici/agent' },
      { kind: 'command', command: 'node' },
    ]);
    expect(tools.every((t) => t.severity === 'fatal')).toBe(true);
    const perSet = entryOf(bareMetal('bm', [{ labels: ['a'], env: { KICI_SANDBOX: 'true' } }]));
    expect(bareMetalTools(perSet, '/', {}).map((t) => t.find)).toContainEqual({
      kind: 'command',
      command: 'bwrap',
    });
    const global = { KICI_AGENT_ENV_KICI_SANDBOX: 'true' };
    expect(bareMetalTools(plain, '/', global).map((t) => t.find)).toContainEqual({
      kind: 'command',
      command: 'bwrap',
    });
    // "true" exactly.
    expect(
      bareMetalTools(plain, '/', { KICI_AGENT_ENV_KICI_SANDBOX: 'yes' }).map((t) => t.find),
    ).not.toContainEqual({
      kind: 'command',
      command: 'bwrap',
    });
  });

  it('preflight stops start-up when node or bwrap is missing from PATH, naming the tool and the fix', async () => {
    const onlyNode = await binDir(['node']);
    const agent = join(onlyNode, 'node');
    const entry = entryOf(
      bareMetal('bm', [{ labels: ['a'], binaryPath: agent, env: { KICI_SANDBOX: 'true' } }]),
    );
    const noBwrap = fatalToolError(
      await preflightEntry(entry, { configPath: '/c.yaml', hostEnv: { PATH: onlyNode } }),
    );
    expect(noBwrap?.problems).toEqual([
      'scaler "bm": bwrap (KICI_SANDBOX=true): bwrap was not found on PATH. Fix: install bubblewrap (apt-get install bubblewrap), or drop KICI_SANDBOX',
    ]);
    const empty = await binDir([]);
    const noNode = fatalToolError(
      await preflightEntry(entry, { configPath: '/c.yaml', hostEnv: { PATH: empty } }),
    );
    expect(
      noNode?.problems.some((p) =>
        p.startsWith('scaler "bm": node: node was not found on PATH. Fix: install Node.js'),
      ),
    ).toBe(true);
    const both = await binDir(['node', 'bwrap']);
    expect(await preflightEntry(entry, { configPath: '/c.yaml', hostEnv: { PATH: both } })).toEqual([]);
  });
});

describe('bare-metal construction warnings', () => {
  function warningsOf(
    input: Record<string, unknown>,
    hostEnv: NodeJS.ProcessEnv = {},
    cgroups = false,
  ): string[] {
    const msgs: string[] = [];
    const logger = pino(
      { level: 'warn' },
      { write: (s: string) => void msgs.push(JSON.parse(s).msg as string) },
    );
    new BareMetalScalerBackend({
      entry: entryOf(input),
      logger,
      baseDir: '/',
      hostEnv,
      hostFacts: { root: true, caps: new Set(), bwrap: true, setpriv: true, userNamespaces: true },
      ...(cgroups
        ? { cgroups: { version: 1, create: () => Promise.resolve([]), remove: () => Promise.resolve() } }
        : {}),
    });
    return msgs;
  }

  it('always warns about trust; names the unconfined (trust: host) label sets and the remedies', () => {
    const w = warningsOf(bareMetal('bm', [{ labels: ['linux'], trust: 'host' }, ['confined']]));
    expect(w).toContainEqual(
      expect.stringMatching(/host processes .*\[linux\], trust: host\); remove trust: host to confine them/),
    );
    expect(w).toContainEqual(expect.stringMatching(/\[linux\] runs jobs unconfined \(trust: host\)/));
    expect(w.join('\n')).not.toContain('[confined]');
    const confined = warningsOf(bareMetal('bm', [['linux']]));
    expect(confined).toEqual([
      expect.stringMatching(/share the host's network and kernel even when confined/),
    ]);
  });

  it('warns that a networkPolicy on a process-mode set cannot be enforced', () => {
    const w = warningsOf(bareMetal('bm', [{ labels: ['linux'], networkPolicy: { denyAll: true } }]));
    expect(w).toContainEqual(
      expect.stringMatching(/\[linux\]: networkPolicy cannot be enforced on bare-metal agent processes/),
    );
    expect(warningsOf(bareMetal('bm', [['linux']]))).not.toContainEqual(
      expect.stringMatching(/networkPolicy/),
    );
  });

  it('warns once (does not fail) when enforceCgroups is set but no way to enforce limits is usable', () => {
    const w = warningsOf(bareMetal('bm', [['linux']], { enforceCgroups: true }));
    expect(w.filter((m) => /enforceCgroups/.test(m))).toEqual([
      expect.stringMatching(/enforceCgroups is set but .*advisory.*loginctl enable-linger/),
    ]);
    expect(warningsOf(bareMetal('bm', [['linux']], { enforceCgroups: true }), {}, true)).not.toContainEqual(
      expect.stringMatching(/enforceCgroups/),
    );
  });
});

describe('bare-metal trusted spawns are logged', () => {
  it('a spawn with the trusted profile logs a warning naming the agent; a default one does not', async () => {
    const msgs: { msg: string; agentId?: string }[] = [];
    const logger = pino({ level: 'warn' }, { write: (s: string) => void msgs.push(JSON.parse(s)) });
    const entry = entryOf(
      bareMetal('bm', [
        { labels: ['trusted'], binaryPath: '/bin/true', env: { KICI_TRUSTED_ENV: 'true' }, trust: 'host' },
        { labels: ['plain'], binaryPath: '/bin/true', trust: 'host' },
      ]),
    );
    const backend = new BareMetalScalerBackend({ entry, logger, baseDir: '/', hostEnv: {} });
    const req = (agentId: string, labels: string[]) => spawnContext(agentId, labels);
    await backend.spawn(req('scaler-bare-metal-trust001', ['trusted']));
    await backend.spawn(req('scaler-bare-metal-plain001', ['plain']));
    await backend.shutdownAll();
    const trusted = msgs.filter((m) => m.msg === 'agent started with the trusted environment profile');
    expect(trusted.map((m) => m.agentId)).toEqual(['scaler-bare-metal-trust001']);
  });
});

describe('bare-metal launch command', () => {
  const user = { uid: 61001, gid: 61001, home: '/h/a' };
  it('composes cgroup join, then bwrap, then setpriv, then the binary', () => {
    const sandbox = bwrapArgs({ workDir: '/h/a', hide: ['/h', '/data'], dropCaps: true });
    const { file, args } = launchCommand({
      binary: '/opt/agent',
      procsFiles: ['/cg/x/cgroup.procs'],
      sandbox,
      user,
    });
    expect(file).toBe('/bin/sh');
    const rest = args.slice(args.indexOf('--') + 1);
    expect(args.slice(3, args.indexOf('--'))).toEqual(['/cg/x/cgroup.procs']);
    expect(rest[0]).toBe('bwrap');
    const afterBwrap = rest.slice(rest.indexOf('--', 1) + 1);
    expect(afterBwrap).toEqual([
      'setpriv',
      '--reuid=61001',
      '--regid=61001',
      '--clear-groups',
      '--inh-caps=-all',
      '--no-new-privs',
      '--',
      '/opt/agent',
    ]);
    expect(launchCommand({ binary: '/opt/agent' })).toEqual({ file: '/opt/agent', args: [] });
    // Through the sealed Node, `env` makes the last exec, with no capability left to read the copy.
    const viaRuntime = launchCommand({ binary: '/opt/agent.js', runtime: '/rt/node', user });
    expect(viaRuntime.args.slice(viaRuntime.args.indexOf('--'))).toEqual([
      '--',
      'env',
      '--',
      '/rt/node',
      '/opt/agent.js',
    ]);
  });

  it('bwrap: read-only root, private /tmp, hidden dirs before the own work dir, own pid namespace, no capabilities', () => {
    const a = bwrapArgs({ workDir: '/h/a', hide: ['/h', '/data'], dropCaps: true });
    const at = (...xs: string[]) => a.findIndex((_, i) => xs.every((x, j) => a[i + j] === x));
    expect(at('--ro-bind', '/', '/')).toBe(0);
    expect(at('--tmpfs', '/tmp')).toBeGreaterThan(0);
    expect(at('--tmpfs', '/h')).toBeLessThan(at('--bind', '/h/a', '/h/a'));
    expect(at('--tmpfs', '/data')).toBeLessThan(at('--bind', '/h/a', '/h/a'));
    expect(at('--unshare-pid')).toBeGreaterThan(0);
    expect(at('--cap-drop', 'ALL')).toBeGreaterThan(0);
    // setpriv inside drops them itself and needs CAP_SETUID to get there.
    expect(bwrapArgs({ workDir: '/h/a', hide: [], dropCaps: false })).not.toContain('--cap-drop');
  });
});
