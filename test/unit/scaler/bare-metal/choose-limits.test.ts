/**
 * Which way a bare-metal scaler enforces its agents' limits, chosen from what the host allows:
 * root with a writable cgroup tree → the cgroupfs writer; otherwise a reachable systemd user
 * manager → a scope per agent; otherwise nothing, said as advisory with the fix. The decision is
 * tested with injected probes; the real probes run on this host as root and, through setpriv, as
 * an unprivileged uid (this host has no systemd user manager, so that uid gets advisory limits).
 */
import { execFile } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import type { CgroupDriver } from '../../../../src/scaler/backends/deps.js';
import {
  chooseAgentLimits,
  hostLimitsProbes,
  type LimitsProbes,
} from '../../../../src/scaler/backends/bare-metal/choose-limits.js';

const ROOT = resolve(import.meta.dirname, '../../../..');
const NODE = join(ROOT, 'node_modules/.bin/node');
const run = promisify(execFile);
const UNPRIVILEGED = 60_991;

const driver: CgroupDriver = { version: 2, create: async () => [], remove: async () => {} };
const scopeTools = {
  systemdRun: '/x/systemd-run',
  systemctl: '/x/systemctl',
  busEnv: { XDG_RUNTIME_DIR: '/run/user/1' },
};

function probes(p: { root: boolean; cgroupfs: boolean; scope: boolean }): LimitsProbes {
  return {
    isRoot: () => p.root,
    cgroupfs: async () => (p.cgroupfs ? driver : undefined),
    userScope: async () => (p.scope ? scopeTools : { unavailable: 'no user manager (test)' }),
  };
}

let dir: string | undefined;
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

describe('choosing how bare-metal limits are enforced', () => {
  it.each([
    // root, writable cgroup tree, user manager → strategy
    [true, true, true, 'cgroupfs'],
    [true, true, false, 'cgroupfs'],
    [true, false, true, 'systemd-user-scope'],
    [true, false, false, 'advisory'],
    [false, true, true, 'systemd-user-scope'],
    [false, true, false, 'advisory'],
    [false, false, true, 'systemd-user-scope'],
    [false, false, false, 'advisory'],
  ] as const)('root=%s cgroupfs=%s user manager=%s → %s', async (root, cgroupfs, scope, want) => {
    const limits = await chooseAgentLimits(true, probes({ root, cgroupfs, scope }));
    expect(limits.strategy).toBe(want);
    expect(limits.enforced).toBe(want !== 'advisory');
    if (want === 'advisory') {
      expect(limits.advisory?.problem).toMatch(/advisory/);
      expect(limits.advisory?.problem).toContain('no user manager (test)');
      expect(limits.advisory?.fix).toMatch(/run the orchestrator as root.*loginctl enable-linger/);
      expect(await limits.prepare('a1', { cpus: 1, memBytes: 1 })).toEqual({});
    } else expect(limits.advisory).toBeUndefined();
  });

  it('not asked for (enforceCgroups off): no probe runs, nothing is advised', async () => {
    const untouched: LimitsProbes = {
      isRoot: () => expect.fail('probed'),
      cgroupfs: () => expect.fail('probed'),
      userScope: () => expect.fail('probed'),
    };
    const limits = await chooseAgentLimits(false, untouched);
    expect(limits).toMatchObject({ strategy: 'off', enforced: false, advisory: undefined });
  });

  it('the real probes: root on this host writes cgroupfs; an unprivileged uid without a user manager gets advisory limits', async () => {
    if (process.getuid?.() !== 0) {
      // Not root here: the unprivileged case is this process itself.
      const limits = await chooseAgentLimits(true, hostLimitsProbes({ PATH: '/usr/bin:/bin' }));
      expect(limits.strategy).not.toBe('cgroupfs');
      return;
    }
    const asRoot = await chooseAgentLimits(true, hostLimitsProbes(process.env));
    expect(asRoot.strategy).toBe('cgroupfs');
    expect(asRoot.describe()).toMatch(/cgroup v[12] filesystem/);
    const script = `import(${JSON.stringify(join(ROOT, 'dist/scaler/backends/bare-metal/choose-limits.js'))}).then(async (m) => { const l = await m.chooseAgentLimits(true, m.hostLimitsProbes(process.env)); console.log(JSON.stringify({ strategy: l.strategy, advisory: l.advisory })); })`;
    const { stdout } = await run(
      'setpriv',
      [`--reuid=${UNPRIVILEGED}`, `--regid=${UNPRIVILEGED}`, '--clear-groups', '--', NODE, '-e', script],
      { env: { PATH: '/usr/bin:/bin', HOME: '/' } },
    );
    const got = JSON.parse(stdout) as { strategy: string; advisory: { problem: string; fix: string } };
    expect(got.strategy).toBe('advisory');
    expect(got.advisory.problem).toMatch(/the orchestrator is not root, and .*advisory/);
    expect(got.advisory.fix).toMatch(/loginctl enable-linger/);
  });

  it('`kici-admin scaler validate` run by an unprivileged uid warns that the limits are advisory, naming the field and the fix', async () => {
    dir = await mkdtemp(join(tmpdir(), 'kici-limits-validate-'));
    await chmod(dir, 0o755);
    const cfg = join(dir, 'scalers.yaml');
    await writeFile(
      cfg,
      [
        'version: 1',
        'scalers:',
        '  - name: bm',
        '    type: bare-metal',
        '    maxAgents: 1',
        '    enforceCgroups: true',
        '    labelSets:',
        '      - labels: [linux]',
        '        binaryPath: /bin/true',
        '        trust: host',
        '',
      ].join('\n'),
    );
    await chmod(cfg, 0o644);
    const admin = join(ROOT, 'dist/cli/admin.js');
    const env = { PATH: `${dirname(NODE)}:/usr/bin:/bin`, HOME: dir };
    const asUser =
      process.getuid?.() === 0
        ? run(
            'setpriv',
            [
              `--reuid=${UNPRIVILEGED}`,
              `--regid=${UNPRIVILEGED}`,
              '--clear-groups',
              '--',
              NODE,
              admin,
              'scaler',
              'validate',
              cfg,
            ],
            { env },
          )
        : run(NODE, [admin, 'scaler', 'validate', cfg], { env });
    const { stdout } = await asUser;
    expect(stdout).toContain(`${cfg}: valid`);
    const warnings = stdout.split('\n').filter((l) => l.includes('enforceCgroups'));
    expect(warnings).toEqual([
      expect.stringMatching(
        /^warning: .*scalers\.yaml: scalers\[0\]\.enforceCgroups: scaler "bm": enforceCgroups is set but agents start without CPU, memory or task limits .*advisory\. Fix: run the orchestrator as root, or .*loginctl enable-linger/,
      ),
    ]);
  });
});
