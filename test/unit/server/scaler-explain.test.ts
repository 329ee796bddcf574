/**
 * Explain no longer decides on its own: `scaler explain` is now a view over the scaler's one
 * decision, so it honours excludeLabels and the machine-pool ledger exactly as requestScale does,
 * and lists each gate it checked. Each case compares explain with what requestScale then does.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { MachineLedger } from '../../../src/scaler/ledger/machine-ledger.js';
import type { ScaleJob, ScaleResult } from '../../../src/scaler/types.js';
import { explainJob } from '../../../src/server/scaler-views.js';
import type { JobRow } from '../../../src/store/index.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0)) await c();
});

let seq = 0;
/** A queued job row in the store that the dispatcher has not seen (so nothing provisions it). */
async function queuedRow(
  h: ManagerHarness,
  spec: Record<string, unknown> & { runsOn: string[] },
): Promise<JobRow> {
  const n = ++seq;
  const [row] = await h.store.jobs.insertRun(
    { id: `r-x${n}`, name: null },
    [{ id: `j-x${n}`, name: 'a', runsOn: spec.runsOn, spec: { steps: [{ run: 'true' }], ...spec } }],
    new Date(h.clock.now()),
  );
  return row!;
}

function scaleJobOf(row: JobRow): ScaleJob {
  const spec = row.spec as { excludeLabels?: string[] };
  return {
    id: row.id,
    runId: row.run_id,
    runsOn: row.runs_on,
    ...(spec.excludeLabels ? { excludeLabels: spec.excludeLabels } : {}),
  };
}

const asAction = (r: ScaleResult) =>
  r.action === 'spawning'
    ? 'spawn'
    : r.action === 'skipped'
      ? r.retryAfterMs !== undefined
        ? 'backoff'
        : 'skip'
      : r.action;

describe('scaler explain is a view over the decision', () => {
  it('honours excludeLabels: the vetoed set is named and the set actually used is the match', async () => {
    const h = await hs.make({
      config: {
        version: 1,
        scalers: [
          bareMetal('alpha', [
            ['linux', 'small'],
            ['linux', 'big'],
          ]),
        ],
      },
    });
    const row = await queuedRow(h, { runsOn: ['linux'], excludeLabels: ['small'] });
    const ex = await explainJob(h.d, h.clock, row);
    expect(ex).toMatchObject({ action: 'spawn', matched: 'big,linux' });
    expect(ex.lines).toContainEqual('excludeLabels [small]: vetoed alpha[linux,small]');
    const r = await h.manager.requestScale(scaleJobOf(row));
    expect(asAction(r)).toBe('spawn');
    expect(h.backend('alpha').spawns[0]!.labelSet).toEqual(['linux', 'big']);
  });

  it('says no-backend when excludeLabels veto every set, as requestScale does', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    const row = await queuedRow(h, { runsOn: ['linux'], excludeLabels: ['kici:scaler:alpha'] });
    const ex = await explainJob(h.d, h.clock, row);
    expect(ex).toMatchObject({ action: 'no-backend' });
    expect(ex.lines.join('\n')).toMatch(/excludeLabels \[kici:scaler:alpha\]: vetoed alpha\[linux\]/);
    expect(asAction(await h.manager.requestScale(scaleJobOf(row)))).toBe('no-backend');
  });

  it('reads the machine-pool ledger: a pool filled by another orchestrator blocks, in its words', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kici-explain-ledger-'));
    const config = scalerConfig({
      version: 1,
      machinePools: [{ name: 'host', cap: { maxCpu: 2 } }],
      scalers: [
        bareMetal('alpha', [{ labels: ['linux'], resources: { requests: { cpus: 1 } } }], {
          machinePool: 'host',
        }),
      ],
    });
    const ledger = new MachineLedger({ dir, instanceId: 'orch-explain' });
    const peer = new MachineLedger({ dir, instanceId: 'orch-peer' });
    cleanup.push(async () => {
      await ledger.stop();
      await peer.stop();
      await rm(dir, { recursive: true, force: true, maxRetries: 20, retryDelay: 50 });
    });
    for (const l of [ledger, peer]) l.registerPool('host', { maxCpu: 2 });
    const h = await hs.make({ config, ledger });
    const row = await queuedRow(h, { runsOn: ['linux'] });

    const free = await explainJob(h.d, h.clock, row);
    expect(free).toMatchObject({ action: 'spawn' });
    expect(free.lines.join('\n')).toMatch(/machine pool "host": room \(0 cpu/);

    // The other orchestrator on this host takes both cpus; our own caps still have room.
    expect(await peer.tryReserve('host', 'peer-1', 2, 0)).toEqual({ ok: true });
    const full = await explainJob(h.d, h.clock, row);
    expect(full).toMatchObject({ action: 'at-capacity' });
    expect(full.lines.join('\n')).toMatch(/caps: room for one more agent/);
    expect(full.reason).toBe('machine pool "host" cpu cap exceeded: used 2 + requested 1 > cap 2');
    const r = await h.manager.requestScale(scaleJobOf(row));
    expect(asAction(r)).toBe('at-capacity');
    expect(r.action === 'at-capacity' && r.reason).toBe(full.reason);
    expect(h.backend('alpha').spawns).toEqual([]);
  });

  it('lists every gate in order for a job that would spawn', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    const row = await queuedRow(h, { runsOn: ['linux'] });
    const ex = await explainJob(h.d, h.clock, row);
    expect(ex.trace).toEqual([
      'route: job labels [linux]',
      'matched scaler "alpha" label set [linux]',
      'backoff: not held',
      'resources: requests 0 cpu, 0 bytes (job → label set → defaults)',
      'caps: room for one more agent (scaler and global counts and resources)',
      'decision: spawn an agent on scaler "alpha" label set [linux]',
    ]);
  });
});
