/**
 * The one scaling decision, as a pure function: each gate in order, the action and reason it stops
 * at, and a trace that names every gate checked.
 */
import { describe, expect, it } from 'vitest';
import { scalerFileSchema } from '../../../src/config/index.js';
import { backoffKey, ProvisionBackoff } from '../../../src/scaler/core/backoff.js';
import { CapBook } from '../../../src/scaler/core/caps.js';
import { decide, type DecideState, type PoolView } from '../../../src/scaler/core/decide.js';
import { buildRoutingTable, type HostFacts } from '../../../src/scaler/core/routing.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const HOST: HostFacts = { os: 'linux', arch: 'x64' };
const T0 = 1_700_000_000_000;
const table = buildRoutingTable(
  scalerFileSchema.parse({
    version: 1,
    scalers: [
      bareMetal(
        'bm',
        [
          ['linux', 'small'],
          ['linux', 'big'],
        ],
        { maxAgents: 2 },
      ),
      {
        name: 'ev',
        type: 'event',
        maxAgents: 4,
        provisioningTargets: ['job:p.yaml'],
        labelSets: [{ labels: ['linux', 'small'] }],
      },
    ],
  }),
  { host: HOST },
);

function state(over: Partial<DecideState> = {}): DecideState & { backoffBook: ProvisionBackoff } {
  const backoffBook = new ProvisionBackoff();
  return {
    backoffBook,
    now: T0,
    draining: false,
    table,
    isProvisioning: () => false,
    backoff: (k, now) => backoffBook.check(k, now),
    streak: (k) => backoffBook.streak(k),
    hasBackend: () => true,
    requests: () => ({ cpus: 1, memBytes: 0 }),
    caps: new CapBook({
      globalMaxAgents: 10,
      scalers: new Map([
        ['bm', { maxAgents: 2 }],
        ['ev', { maxAgents: 4 }],
      ]),
    }),
    live: () => ({ global: 0, scaler: 0 }),
    machinePool: () => undefined,
    ...over,
  };
}

describe('decide', () => {
  it('spawns, tracing every gate in order', () => {
    const d = decide({ id: 'j', labels: ['linux'], exclude: ['small'] }, state());
    expect(d).toMatchObject({ action: 'spawn', match: { scalerName: 'bm', key: 'big,linux' } });
    expect(d.trace).toEqual([
      'route: job labels [linux]',
      'excludeLabels [small]: vetoed bm[linux,small]',
      'matched scaler "bm" label set [big,linux]',
      'backoff: not held',
      'resources: requests 1 cpu, 0 bytes (job → label set → defaults)',
      'caps: room for one more agent (scaler and global counts and resources)',
      'decision: spawn an agent on scaler "bm" label set [big,linux]',
    ]);
  });

  it('skips process-mode sets for a container job, and says which', () => {
    const d = decide({ labels: ['linux', 'small'], image: 'alpine:3' }, state());
    expect(d).toMatchObject({ action: 'spawn', match: { scalerName: 'ev' } });
    expect(d.trace.slice(0, 3)).toEqual([
      'route: job labels [linux,small]',
      'container image "alpine:3": skipped process-mode set bm[linux,small]',
      'matched scaler "ev" label set [linux,small]',
    ]);
  });

  it('skips while draining and while the job is already being provisioned, before routing', () => {
    expect(decide({ id: 'j', labels: ['gpu'] }, state({ draining: true }))).toMatchObject({
      action: 'skip',
      reason: 'orchestrator is draining',
    });
    const inFlight = decide({ id: 'j', labels: ['gpu'] }, state({ isProvisioning: (id) => id === 'j' }));
    expect(inFlight).toMatchObject({ action: 'skip', reason: 'provision-in-flight' });
    // Without a job id (a planner group) the in-flight gate does not apply.
    expect(decide({ labels: ['linux'] }, state({ isProvisioning: () => true })).action).toBe('spawn');
  });

  it('answers no-backend when excludeLabels veto every set, naming the veto', () => {
    const d = decide({ labels: ['big', 'linux'], exclude: ['kici:scaler:bm'] }, state());
    expect(d).toMatchObject({ action: 'no-backend', reason: 'no scaler label set matches [big,linux]' });
    expect(d.trace).toContain('excludeLabels [kici:scaler:bm]: vetoed bm[big,linux]');
  });

  it('answers no-backend for a matched scaler without a running backend', () => {
    const d = decide({ labels: ['linux', 'big'] }, state({ hasBackend: () => false }));
    expect(d).toMatchObject({ action: 'no-backend', reason: 'scaler "bm" has no running backend' });
  });

  it('holds a label set in backoff, with the time left', () => {
    const s = state();
    s.backoffBook.recordFailure(backoffKey('bm', 'big,linux'), T0 - 10_000, 'a1', {
      kind: 'config',
      message: 'x',
    });
    const d = decide({ labels: ['linux', 'big'] }, s);
    expect(d).toMatchObject({ action: 'backoff', retryAfterMs: 20_000 });
    expect(d.trace.at(-1)).toMatch(/^backoff: scaler "bm" label set \[big,linux\] failed to start an agent/);
    // Another label set of the same scaler is not held.
    expect(decide({ labels: ['linux', 'small'] }, s).action).toBe('spawn');
  });

  it('a transient streak does not hold the label set, and the trace says so', () => {
    const s = state();
    s.backoffBook.recordFailure(
      backoffKey('bm', 'big,linux'),
      T0,
      'a1',
      { kind: 'transient', message: 'ECONNRESET' },
      { transient: true },
    );
    const d = decide({ labels: ['linux', 'big'] }, s);
    expect(d.action).toBe('spawn');
    expect(d.trace).toContain(
      'backoff: not held; 1 transient failure(s) in a row, retried (last: transient: ECONNRESET)',
    );
  });

  it('stops at the caps with the blocker', () => {
    const d = decide({ labels: ['linux', 'big'] }, state({ live: () => ({ global: 2, scaler: 2 }) }));
    expect(d).toMatchObject({ action: 'at-capacity', reason: 'scaler "bm" is at maxAgents (2/2)' });
    expect(d.trace.at(-1)).toBe('caps: blocked by scaler-count: scaler "bm" is at maxAgents (2/2)');
  });

  it('checks the machine pool last: room, full, unreadable, or not read yet', () => {
    const pooled = (view: PoolView | undefined) =>
      decide({ labels: ['linux', 'big'] }, state({ machinePool: () => 'host', pool: () => view }));
    expect(pooled({ cap: { maxCpu: 2 }, usedCpu: 1, usedMemoryBytes: 0 }).action).toBe('spawn');
    expect(pooled({ cap: { maxCpu: 2 }, usedCpu: 1.5, usedMemoryBytes: 0 })).toMatchObject({
      action: 'at-capacity',
      reason: 'machine pool "host" cpu cap exceeded: used 1.5 + requested 1 > cap 2',
    });
    expect(pooled({ error: 'corrupt file' })).toMatchObject({
      action: 'at-capacity',
      reason: 'machine pool "host": ledger unavailable: corrupt file',
    });
    const unread = pooled(undefined);
    expect(unread.action).toBe('spawn');
    expect(unread.trace).toContain('machine pool "host": checked when the agent is reserved');
  });

  it('quiet decides the same without writing a trace', () => {
    const jobs = [
      { labels: ['linux', 'small'], image: 'alpine:3' },
      { labels: ['gpu'] },
      { labels: ['big', 'linux'], exclude: ['kici:scaler:bm'] },
      { labels: ['linux'], exclude: ['small'] },
    ];
    for (const j of jobs) {
      const loud = decide(j, state());
      const quiet = decide(j, state({ quiet: true }));
      expect({ ...quiet, trace: loud.trace }).toEqual(loud);
      expect(quiet.trace).toEqual([]);
    }
  });
});
