/**
 * The machine-pool ledger through the manager: two orchestrator instances on one host share a
 * machine pool through a real MachineLedger directory and never exceed the pool cap together.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MachineLedger } from '../../../src/scaler/ledger/machine-ledger.js';
import type { ScaleResult } from '../../../src/scaler/types.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
let dir: string;
const ledgers: MachineLedger[] = [];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-mgr-ledger-'));
});
afterEach(async () => {
  for (const l of ledgers.splice(0)) await l.stop();
  // Ledger releases are fire-and-forget and may still hold the pool lock for a moment.
  await rm(dir, { recursive: true, force: true, maxRetries: 20, retryDelay: 50 });
});

const config = scalerConfig({
  version: 1,
  machinePools: [{ name: 'host', cap: { maxCpu: 3, maxMemory: '64g' } }],
  scalers: [
    bareMetal('alpha', [{ labels: ['linux'], resources: { requests: { cpus: 1 } } }], {
      maxAgents: 10,
      machinePool: 'host',
    }),
  ],
});

async function instance(id: string): Promise<ManagerHarness> {
  const ledger = new MachineLedger({ dir, instanceId: id });
  ledgers.push(ledger);
  for (const pool of config.machinePools ?? []) ledger.registerPool(pool.name, pool.cap);
  return hs.make({ dispatcher: false, instanceId: id, ledger, config });
}

describe('machine pool ledger', () => {
  it('two managers with different instance ids never exceed the pool cap together', async () => {
    const a = await instance('orch-a');
    const b = await instance('orch-b');
    let n = 0;
    const ask = (h: ManagerHarness) =>
      h.manager.requestScale({ id: `j${++n}`, runId: 'r', runsOn: ['linux'] });
    // Eight concurrent requests, interleaved over both instances: only 3 cpus exist.
    const results: ScaleResult[] = await Promise.all([a, b, a, b, a, b, a, b].map(ask));
    await a.settle();
    await b.settle();
    const spawning = results.filter((r) => r.action === 'spawning');
    expect(spawning).toHaveLength(3);
    for (const r of results.filter((x) => x.action !== 'spawning')) {
      expect(r).toMatchObject({
        action: 'at-capacity',
        reason: expect.stringContaining('machine pool "host"'),
      });
    }
    const usage = await ledgers[0]!.usage('host');
    expect(usage.usedCpu).toBe(3);
    expect(a.manager.capBook().count() + b.manager.capBook().count()).toBe(3);
    // Refused reservations left nothing behind in either manager.
    expect(a.manager.entries().length + b.manager.entries().length).toBe(3);
    expect(a.backend('alpha').spawns.length + b.backend('alpha').spawns.length).toBe(3);
  });

  it('capacity an agent of one instance gives back is usable by the other', async () => {
    const a = await instance('orch-a');
    const b = await instance('orch-b');
    for (let i = 0; i < 3; i++)
      expect((await a.manager.requestScale({ id: `a${i}`, runId: 'r', runsOn: ['linux'] })).action).toBe(
        'spawning',
      );
    await a.settle();
    expect((await b.manager.requestScale({ id: 'b0', runId: 'r', runsOn: ['linux'] })).action).toBe(
      'at-capacity',
    );
    // One of a's agents runs and goes away.
    const id = a.backend('alpha').spawns[0]!.agentId;
    a.backend('alpha').resolveSpawn(id);
    await a.settle();
    expect((await a.registerAgent(id)).ok).toBe(true);
    await a.manager.onAgentDisconnected(id);
    await a.settle();
    // The ledger release is fire-and-forget; wait for the file to show it.
    for (let i = 0; i < 100 && (await ledgers[0]!.usage('host')).usedCpu !== 2; i++)
      await new Promise((r) => setTimeout(r, 10));
    expect((await ledgers[0]!.usage('host')).usedCpu).toBe(2);
    expect((await b.manager.requestScale({ id: 'b1', runId: 'r', runsOn: ['linux'] })).action).toBe(
      'spawning',
    );
  });
});
