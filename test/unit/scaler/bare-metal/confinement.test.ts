/**
 * Which mechanism keeps a bare-metal job away from the orchestrator's secrets, as a pure function of
 * the host's facts and the label set's keys: per-agent users where the uid may change, else the
 * bubblewrap sandbox, else a refusal naming the fix, unless the set says `trust: host`.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  chooseConfinement,
  USER_SWITCH_CAPS,
  type ConfinementRequest,
  type HostFacts,
} from '../../../../src/scaler/backends/bare-metal/confinement.js';
import { planConfinement } from '../../../../src/scaler/backends/bare-metal/confinement-plan.js';
import { capsFromStatus } from '../../../../src/scaler/backends/bare-metal/host-probe.js';
import { bareMetal, scalerConfig } from '../../../helpers/scaler-config.js';

const ALL_CAPS = new Set<string>(USER_SWITCH_CAPS);
const host = (over: Partial<HostFacts>): HostFacts => ({
  root: false,
  caps: new Set(),
  bwrap: true,
  setpriv: true,
  userNamespaces: true,
  ...over,
});
const none: ConfinementRequest = { sandbox: false };

describe('chooseConfinement', () => {
  const table: [string, HostFacts, ConfinementRequest, string][] = [
    ['root, no keys', host({ root: true }), none, 'users'],
    ['root without bwrap', host({ root: true, bwrap: false, userNamespaces: false }), none, 'users'],
    ['service user with the uid-switch capabilities', host({ caps: ALL_CAPS }), none, 'users'],
    [
      'service user with only CAP_SETUID/CAP_SETGID',
      host({ caps: new Set(['CAP_SETUID', 'CAP_SETGID']) }),
      none,
      'sandbox',
    ],
    ['root without setpriv, bwrap works', host({ root: true, setpriv: false }), none, 'sandbox'],
    ['unprivileged, bwrap works', host({}), none, 'sandbox'],
    ['unprivileged, bwrap but no user namespaces', host({ userNamespaces: false }), none, 'refused'],
    ['unprivileged, no bwrap', host({ bwrap: false, userNamespaces: false }), none, 'refused'],
    [
      'unprivileged, no bwrap, trust: host',
      host({ bwrap: false, userNamespaces: false }),
      { sandbox: false, trust: 'host' },
      'host',
    ],
    ['root, trust: host', host({ root: true }), { sandbox: false, trust: 'host' }, 'host'],
    ['runAsUser: dynamic as root', host({ root: true }), { sandbox: false, runAsUser: 'dynamic' }, 'users'],
    ['runAsUser: dynamic unprivileged', host({}), { sandbox: false, runAsUser: 'dynamic' }, 'refused'],
    ['KICI_SANDBOX as root', host({ root: true }), { sandbox: true }, 'sandbox'],
    [
      'KICI_SANDBOX and runAsUser as root',
      host({ root: true }),
      { sandbox: true, runAsUser: 'dynamic' },
      'users+sandbox',
    ],
    [
      'KICI_SANDBOX without bwrap',
      host({ root: true, bwrap: false, userNamespaces: false }),
      { sandbox: true },
      'refused',
    ],
    ['explicit keys win over trust: host', host({ root: true }), { sandbox: true, trust: 'host' }, 'sandbox'],
  ];
  it.each(table)('%s', (_name, facts, req, want) => {
    const got = chooseConfinement(facts, req);
    expect(got.ok ? got.mode : 'refused').toBe(want);
  });

  it('a refusal names the fix: bubblewrap, the capabilities, and trust: host', () => {
    const got = chooseConfinement(host({ bwrap: false, userNamespaces: false }), none);
    expect(got.ok).toBe(false);
    if (got.ok) return;
    expect(got.problem).toContain('bwrap is not on PATH');
    expect(got.problem).toContain('lacks CAP_SETUID');
    expect(got.fix).toContain('install bubblewrap');
    expect(got.fix).toContain('AmbientCapabilities=CAP_SETUID CAP_SETGID');
    expect(got.fix).toContain('trust: host');
  });

  it('never leaves a set without a security key unconfined, on any host', () => {
    const facts = fc.record({
      root: fc.boolean(),
      caps: fc.subarray([...USER_SWITCH_CAPS]).map((c) => new Set<string>(c)),
      bwrap: fc.boolean(),
      setpriv: fc.boolean(),
      userNamespaces: fc.boolean(),
    });
    fc.assert(
      fc.property(facts, (f) => {
        const got = chooseConfinement(f, none);
        if (!got.ok) return;
        expect(got.mode).not.toBe('host');
        if (got.mode === 'sandbox') expect(f.bwrap && f.userNamespaces).toBe(true);
        if (got.mode === 'users') expect(f.setpriv).toBe(true);
      }),
    );
  });
});

describe('planConfinement', () => {
  it('plans each process-mode set, skips job-image sets, and names the scaler, set and fix on refusal', () => {
    const entry = scalerConfig({
      version: 1,
      scalers: [
        bareMetal('bm', [
          ['plain'],
          { labels: ['trusted'], trust: 'host' },
          { labels: ['jobimage'], binaryPath: undefined, image: 'alpine:3' },
        ]),
      ],
    }).scalers[0]!;
    const ok = planConfinement(entry, host({}), {});
    expect(ok.errors).toEqual([]);
    expect(ok.sets.map((s) => [s.labelSet, s.mode, s.chosen])).toEqual([
      ['plain', 'sandbox', 'auto'],
      ['trusted', 'host', 'explicit'],
    ]);
    const refused = planConfinement(entry, host({ bwrap: false, userNamespaces: false }), {});
    expect(refused.errors).toHaveLength(1);
    expect(refused.errors[0]).toMatch(/^scaler "bm" labelSets\[0\] \[plain\]: .*fix: install bubblewrap/);
    // KICI_SANDBOX forwarded to every agent counts as the set's own key.
    const forwarded = planConfinement(entry, host({ root: true }), { KICI_AGENT_ENV_KICI_SANDBOX: 'true' });
    expect(forwarded.sets[0]!.mode).toBe('sandbox');
  });
});

describe('capsFromStatus', () => {
  it('reads the effective set from /proc/<pid>/status', () => {
    expect(capsFromStatus('Name:\tx\nCapEff:\t0000000000000000\n')).toEqual(new Set());
    // root: every bit set
    expect(capsFromStatus('CapEff:\t000001ffffffffff\n')).toEqual(ALL_CAPS);
    // CAP_SETGID (6) and CAP_SETUID (7) only: 0xc0
    expect(capsFromStatus('CapEff:\t00000000000000c0\n')).toEqual(new Set(['CAP_SETGID', 'CAP_SETUID']));
    expect(capsFromStatus('')).toEqual(new Set());
  });
});

describe('othersCannotRun', () => {
  it('names the first dir other uids cannot enter, or a file they cannot read and run', async () => {
    const { chmod, mkdtemp, mkdir, rm, writeFile } = await import('node:fs/promises');
    const { othersCannotRun } = await import('../../../../src/scaler/backends/bare-metal/host-probe.js');
    const dir = await mkdtemp('/tmp/kici-reach-');
    try {
      await chmod(dir, 0o755);
      await mkdir(`${dir}/private`, { mode: 0o700 });
      await writeFile(`${dir}/private/agent`, '');
      await writeFile(`${dir}/agent`, '');
      await chmod(`${dir}/private/agent`, 0o755);
      await chmod(`${dir}/agent`, 0o750);
      expect(othersCannotRun(`${dir}/private/agent`)).toBe(`${dir}/private is mode 0700`);
      expect(othersCannotRun(`${dir}/agent`)).toMatch(/agent is mode 0750 \(others need read and execute\)/);
      await chmod(`${dir}/agent`, 0o755);
      expect(othersCannotRun(`${dir}/agent`)).toBeUndefined();
      expect(othersCannotRun(`${dir}/missing`)).toBeUndefined();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
