/**
 * In a cluster, "no backend" must count agent tokens issued through another instance. A real
 * Dispatcher on the real PGlite store; the token is written to the shared store after the
 * dispatcher read its tokens, as when a peer issues it.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClusterNode } from '../../../src/cluster/cluster-node.js';
import { InstancesRepo } from '../../../src/cluster/instances-repo.js';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { runSpecSchema } from '../../../src/jobs/run-spec.js';
import { systemClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';

let fresh: Awaited<ReturnType<typeof freshStore>>;
beforeAll(async () => {
  fresh = await freshStore();
}, 60_000);
afterAll(async () => {
  await fresh.close();
});

const spec = (label: string) =>
  runSpecSchema.parse({ jobs: { a: { runsOn: ['linux', label], steps: [{ run: 'true' }] } } });

describe('no-backend judgement in a cluster', () => {
  it('a job waits when a peer issued a matching token after this instance read the tokens; without one it is no-backend', async () => {
    const d = new Dispatcher({
      store: fresh.store,
      clock: systemClock,
      logger: pino({ level: 'silent' }),
      instanceId: 'nb-1',
    });
    await d.recover();
    await fresh.store.tokens.mint({
      agentId: 'peer-agent',
      labels: ['linux', 'nb-peer'],
      kind: 'static',
      now: new Date(),
    });
    const waiting = (await d.submit(spec('nb-peer'))).jobs[0]!.id;
    const orphan = (await d.submit(spec('nb-none'))).jobs[0]!.id;
    await d.requestPump();
    expect((await fresh.store.jobs.get(waiting))!.state).toBe('queued');
    expect(d.queue.get(waiting)?.waiting).toBe('waiting for a matching agent');
    expect((await fresh.store.jobs.get(orphan))!.state).toBe('no-backend');
    await d.stop();
  });

  it('a job waits when a peer that can provision for it started after this instance last read its peers', async () => {
    const log = pino({ level: 'silent' });
    // The node as an orchestrator builds it; never started, so its peers are read only on demand.
    const node = new ClusterNode({
      db: fresh.store.db,
      engine: 'pglite',
      databaseUrl: undefined,
      instanceId: 'nb-2',
      version: '0.0.0-test',
      heartbeatMs: 60_000,
      lockTimeoutMs: 1_000,
      facts: { address: () => 'http://127.0.0.1:1', agentsConnected: () => 0, jobsRunning: () => 0 },
      log,
    });
    const d = new Dispatcher({
      store: fresh.store,
      clock: systemClock,
      logger: log,
      instanceId: 'nb-2',
      peersCould: (runsOn) => node.peersCouldScale(runsOn),
      refreshPeers: () => node.refreshPeerSets(),
    });
    await d.recover();
    // The peer's first beat, with the label sets its scalers provision for.
    await new InstancesRepo(fresh.store.db).beat(
      {
        id: 'nb-peer',
        address: 'http://127.0.0.1:2',
        version: '0.0.0-test',
        heartbeatMs: 60_000,
        agentsConnected: 0,
        jobsRunning: 0,
        leader: false,
        scaleLabelSets: [['linux', 'nb-scaled']],
      },
      true,
    );
    const waiting = (await d.submit(spec('nb-scaled'))).jobs[0]!.id;
    const orphan = (await d.submit(spec('nb-nobody'))).jobs[0]!.id;
    await d.requestPump();
    expect((await fresh.store.jobs.get(waiting))!.state).toBe('queued');
    expect((await fresh.store.jobs.get(orphan))!.state).toBe('no-backend');
    await d.stop();
  });
});
