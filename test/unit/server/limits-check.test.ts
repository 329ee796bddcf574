/**
 * The `limits:<scaler>` rows of `kici-admin diagnose`: PASS naming the mechanism when the agents'
 * limits are enforced, WARN with the fix when they are advisory, no row when none were asked for.
 * The views come from real bare-metal backends built with each strategy.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { scalerFileSchema } from '../../../src/config/index.js';
import {
  CgroupfsLimits,
  NoLimits,
  UserScopeLimits,
  type AgentLimits,
} from '../../../src/scaler/backends/bare-metal/agent-limits.js';
import { BareMetalScalerBackend } from '../../../src/scaler/backends/bare-metal/backend.js';
import { chooseAgentLimits } from '../../../src/scaler/backends/bare-metal/choose-limits.js';
import { limitsRows } from '../../../src/server/limits-check.js';

function backend(
  name: string,
  limits: AgentLimits | undefined,
  enforceCgroups: boolean,
  warn: string[] = [],
) {
  const entry = scalerFileSchema.parse({
    version: 1,
    scalers: [
      {
        name,
        type: 'bare-metal',
        maxAgents: 1,
        enforceCgroups,
        labelSets: [{ labels: ['linux'], binaryPath: '/bin/true', trust: 'host' }],
      },
    ],
  }).scalers[0]!;
  const logger = pino({ level: 'warn' }, { write: (s: string) => void warn.push(JSON.parse(s).msg) });
  return new BareMetalScalerBackend({
    entry,
    logger,
    baseDir: '/',
    hostEnv: {},
    hostFacts: { root: true, caps: new Set(), bwrap: true, setpriv: true, userNamespaces: true },
    limits,
  });
}

const driver = { version: 2 as const, create: async () => [], remove: async () => {} };
const scopeTools = { systemdRun: '/x/systemd-run', systemctl: '/x/systemctl', busEnv: {} };
const scope = new UserScopeLimits(scopeTools);

describe('diagnose limits rows', () => {
  it.each([
    [
      'cgroupfs',
      new CgroupfsLimits(driver),
      true,
      'PASS',
      /^agent limits enforced through the cgroup v2 filesystem/,
    ],
    ['user scope', scope, true, 'PASS', /^agent limits enforced through a systemd user scope per agent/],
    [
      'user scope without the pids controller',
      new UserScopeLimits({ ...scopeTools, missingControllers: ['pids'] }),
      true,
      'WARN',
      /^agent limits enforced through a systemd user scope per agent .*, except: .*no pids controller delegated.*task limits are advisory; fix: add `Delegate=memory cpu pids`/,
    ],
    [
      'advisory',
      undefined, // chosen below from probes that find neither way
      true,
      'WARN',
      /^enforceCgroups is set but agents start without CPU, memory or task limits \(.*\); the limits are advisory; fix: run the orchestrator as root, or .*loginctl enable-linger/,
    ],
  ] as const)('%s → %s', async (_case, given, enforce, status, message) => {
    const limits =
      given ??
      (await chooseAgentLimits(true, {
        isRoot: () => false,
        cgroupfs: async () => undefined,
        userScope: async () => ({ unavailable: 'no systemd user manager answers for uid 1000' }),
      }));
    const rows = limitsRows([{ name: 'bm', ...backend('bm', limits, enforce).limitsEnforcement() }]);
    expect(rows).toEqual([
      {
        name: 'limits:bm',
        status,
        message: expect.stringMatching(message),
        details: {
          strategy: limits.strategy,
          fix: status === 'WARN' ? expect.stringMatching(/enable-linger|Delegate=/) : null,
        },
      },
    ]);
  });

  it('no row for a scaler that did not ask for limits; one row each for those that did, in order', () => {
    const rows = limitsRows(
      [
        backend('plain', new NoLimits('off'), false),
        backend('a', new CgroupfsLimits(driver), true),
        backend('b', undefined, true),
      ].map((b) => ({ name: b.name, ...b.limitsEnforcement() })),
    );
    expect(rows.map((r) => [r.name, r.status])).toEqual([
      ['limits:a', 'PASS'],
      ['limits:b', 'WARN'],
    ]);
  });

  it('an advisory scaler warns once when built, with the fix; an enforced one does not warn', () => {
    const advisory: string[] = [];
    backend('bm', undefined, true, advisory);
    expect(advisory.filter((w) => /advisory/.test(w))).toEqual([
      expect.stringMatching(
        /^scaler "bm": enforceCgroups is set but .*advisory\. Fix: run the orchestrator as root/,
      ),
    ]);
    const enforced: string[] = [];
    backend('bm', scope, true, enforced);
    expect(enforced.filter((w) => /advisory|enforceCgroups/.test(w))).toEqual([]);
  });
});
