/**
 * No silent catches in the scaler: cleanup the manager carries on from (token revocation,
 * machine-pool release, the re-reservation after a restart) is logged with its context, counted per
 * site, and handed to `onSwallowedError` for the metric. The re-reservation also reports a refusal
 * (`ok: false`), not only a thrown error.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { MachineLedger } from '../../../src/scaler/ledger/machine-ledger.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0)) await c();
});

interface LogRecord {
  msg: string;
  site?: string;
  agentId?: string;
  pool?: string;
  err?: string;
}

function capture() {
  const records: LogRecord[] = [];
  const logger = pino({ level: 'info' }, { write: (l: string) => void records.push(JSON.parse(l)) });
  return { logger, records, of: (site: string) => records.filter((r) => r.site === site) };
}

/** Every onSwallowedError call, as the orchestrator's metric would see it. */
function hooked(h: ManagerHarness): { site: string; err: string }[] {
  const calls: { site: string; err: string }[] = [];
  const d = h.d;
  h.manager.setHooks({
    onCapacityFreed: () => void d.requestPump(),
    onJobEvent: () => {},
    onSpawnFailed: () => {},
    onSwallowedError: (site, err) => calls.push({ site, err: (err as Error).message }),
  });
  return calls;
}

const config = scalerConfig({
  version: 1,
  machinePools: [{ name: 'host', cap: { maxCpu: 2 } }],
  scalers: [
    bareMetal('alpha', [{ labels: ['linux'], resources: { requests: { cpus: 1 } } }], {
      machinePool: 'host',
    }),
  ],
});

/** Ledger file I/O outlasts the harness's settle: wait for what the test needs. */
async function until(h: ManagerHarness, done: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !done(); i++) {
    await new Promise((r) => setTimeout(r, 10));
    await h.settle();
  }
  if (!done()) throw new Error('condition not reached');
}

async function ledgerDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-swallow-'));
  cleanup.push(() => rm(dir, { recursive: true, force: true, maxRetries: 20, retryDelay: 50 }));
  return dir;
}

function ledgerIn(dir: string, instanceId: string): MachineLedger {
  const l = new MachineLedger({ dir, instanceId });
  l.registerPool('host', { maxCpu: 2 });
  cleanup.unshift(() => l.stop());
  return l;
}

describe('errors the scaler carries on from are logged, counted and reported', () => {
  it('a failed token revocation and a failed pool release on teardown', async () => {
    const { logger, of } = capture();
    const ledger = ledgerIn(await ledgerDir(), 'orch-1');
    const h = await hs.make({ config, ledger, logger });
    const calls = hooked(h);
    await h.submit({ a: { runsOn: ['linux'] } });
    const b = h.backend('alpha');
    await until(h, () => b.pendingIds().length === 1);
    const [id] = b.pendingIds();
    const revoke = h.store.tokens.revokeForAgent;
    h.store.tokens.revokeForAgent = () => Promise.reject(new Error('database is gone'));
    cleanup.push(async () => {
      h.store.tokens.revokeForAgent = revoke;
    });
    ledger.release = () => Promise.reject(new Error('ledger directory is read-only'));

    b.failSpawn(id!, new Error('boom'));
    await until(h, () => Object.keys(h.manager.swallowedErrors()).length === 2);

    expect(h.manager.swallowedErrors()).toEqual({ 'scaler.token-revoke': 1, 'scaler.ledger-release': 1 });
    expect(calls).toEqual(
      expect.arrayContaining([
        { site: 'scaler.token-revoke', err: 'database is gone' },
        { site: 'scaler.ledger-release', err: 'ledger directory is read-only' },
      ]),
    );
    expect(of('scaler.token-revoke')).toEqual([
      expect.objectContaining({
        agentId: id,
        err: 'database is gone',
        msg: expect.stringContaining('scaler.token-revoke'),
      }),
    ]);
    expect(of('scaler.ledger-release')).toEqual([
      expect.objectContaining({ agentId: id, pool: 'host', err: 'ledger directory is read-only' }),
    ]);
  });

  it('a failed pool cap write on reload is reported, and the process carries on', async () => {
    const { logger, of } = capture();
    const ledger = ledgerIn(await ledgerDir(), 'orch-1');
    const h = await hs.make({ config, ledger, logger });
    const calls = hooked(h);
    ledger.updateCap = () => Promise.reject(new Error('ledger directory is read-only'));
    const next = scalerConfig({ ...config, machinePools: [{ name: 'host', cap: { maxCpu: 4 } }] });
    await h.manager.reload(next, h.factory);
    await until(h, () => calls.length === 1);
    expect(calls).toEqual([{ site: 'scaler.ledger-cap-update', err: 'ledger directory is read-only' }]);
    expect(of('scaler.ledger-cap-update')).toEqual([
      expect.objectContaining({ pool: 'host', err: 'ledger directory is read-only' }),
    ]);
  });

  it('without a hook the manager still logs and counts', async () => {
    const { logger, of } = capture();
    const h = await hs.make({
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] },
      logger,
      dispatcher: false,
    });
    h.manager.setHooks({ onCapacityFreed: () => {}, onJobEvent: () => {}, onSpawnFailed: () => {} });
    const r = await h.manager.requestScale({ id: 'j1', runId: 'r', runsOn: ['linux'] });
    if (r.action !== 'spawning') throw new Error(r.action);
    const revoke = h.store.tokens.revokeForAgent;
    h.store.tokens.revokeForAgent = () => Promise.reject(new Error('database is gone'));
    cleanup.push(async () => {
      h.store.tokens.revokeForAgent = revoke;
    });
    h.backend('alpha').failSpawn(r.agentId, new Error('boom'));
    await h.settle();
    expect(h.manager.swallowedErrors()).toEqual({ 'scaler.token-revoke': 1 });
    expect(of('scaler.token-revoke')).toHaveLength(1);
  });

  it('the re-reservation after a restart reports a refusal and an error, and the agent is still adopted', async () => {
    // Before the crash: one agent holds one cpu of the pool.
    const first = await hs.make({
      instanceId: 'orch-1',
      config,
      ledger: ledgerIn(await ledgerDir(), 'orch-1'),
    });
    await first.submit({ a: { runsOn: ['linux'] }, b: { runsOn: ['linux'] } });
    const b1 = first.backend('alpha');
    await until(first, () => b1.pendingIds().length === 2);
    for (const id of b1.pendingIds()) b1.resolveSpawn(id);
    await first.settle();
    const [refused, failing] = b1.spawns.map((s) => s.agentId);

    // After it: the pool file is gone (a fresh ledger directory) and a peer took the whole pool.
    const dir = await ledgerDir();
    const peer = ledgerIn(dir, 'orch-peer');
    expect(await peer.tryReserve('host', 'peer-1', 2, 0)).toEqual({ ok: true });
    const ledger = ledgerIn(dir, 'orch-1');
    const tryReserve = ledger.tryReserve.bind(ledger);
    ledger.tryReserve = (pool, agentId, cpus, mem) =>
      agentId === failing
        ? Promise.reject(new Error('lock timed out'))
        : tryReserve(pool, agentId, cpus, mem);
    const { logger, of } = capture();
    const h = await hs.make({
      instanceId: 'orch-1',
      config,
      ledger,
      logger,
      dispatcher: false,
      configureBackend: (b) => {
        b.adoptResult = true;
      },
    });
    const calls: string[] = [];
    h.manager.setHooks({
      onCapacityFreed: () => {},
      onJobEvent: () => {},
      onSpawnFailed: () => {},
      onSwallowedError: (site) => calls.push(site),
    });
    expect(await h.manager.recover(60_000)).toEqual({ adopted: 2, reclaimed: 0, dropped: 0 });
    expect(h.manager.swallowedErrors()).toEqual({ 'scaler.ledger-rereserve': 2 });
    expect(calls).toEqual(['scaler.ledger-rereserve', 'scaler.ledger-rereserve']);
    const logged = of('scaler.ledger-rereserve');
    expect(logged).toContainEqual(
      expect.objectContaining({
        agentId: refused,
        pool: 'host',
        err: 'machine pool "host" cpu cap exceeded: used 2 + requested 1 > cap 2',
      }),
    );
    expect(logged).toContainEqual(
      expect.objectContaining({ agentId: failing, pool: 'host', err: 'lock timed out' }),
    );
    expect(
      h.manager
        .entries()
        .map((e) => e.agentId)
        .sort(),
    ).toEqual([refused, failing].sort());
  });
});
