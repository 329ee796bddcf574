/**
 * Instance identity and presence: rows in kici_instances on the real PGlite store, the instance-id
 * rules, and the `kici-admin cluster status` table.
 */
import { sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { resolveInstanceId } from '../../../src/cluster/instance-id.js';
import { InstancesRepo } from '../../../src/cluster/instances-repo.js';
import { InstancePresence } from '../../../src/cluster/presence.js';
import { PART_REFRESH_BEATS } from '../../../src/cluster/cluster-view.js';
import { ClusterNode } from '../../../src/cluster/cluster-node.js';
import { renderClusterStatus } from '../../../src/cli/admin/cluster-commands.js';
import { UserError } from '../../../src/util/errors.js';
import { freshStore } from '../../helpers/data-dir.js';
import { eventually } from '../../helpers/orchestrator.js';

let fresh: Awaited<ReturnType<typeof freshStore>>;
let repo: InstancesRepo;
beforeAll(async () => {
  fresh = await freshStore();
  repo = new InstancesRepo(fresh.store.db);
}, 60_000);
afterAll(async () => {
  await fresh.close();
});
afterEach(async () => {
  await sql`delete from kici_instances`.execute(fresh.store.db);
});

const beat = (id: string, over: Partial<Parameters<InstancesRepo['beat']>[0]> = {}) => ({
  id,
  address: `http://127.0.0.1:1/${id}`,
  version: '0.0.0-test',
  heartbeatMs: 1000,
  agentsConnected: 2,
  jobsRunning: 1,
  leader: false,
  ...over,
});

describe('kici_instances', () => {
  it('a beat upserts one row per instance, with counts and the database clock', async () => {
    await repo.beat(beat('orch-a', { leader: true }), true);
    await repo.beat(beat('orch-b', { agentsConnected: 5 }), true);
    await repo.beat(beat('orch-b', { agentsConnected: 7, jobsRunning: 3 }));
    const list = await repo.list();
    expect(list.map((i) => [i.id, i.state, i.leader, i.agentsConnected, i.jobsRunning])).toEqual([
      ['orch-a', 'alive', true, 2, 1],
      ['orch-b', 'alive', false, 7, 3],
    ]);
    for (const i of list) expect(i.heartbeatAgeMs).toBeLessThan(1000);
  });

  it('an instance whose heartbeat is 3 intervals old is dead, and a dead one is never leader', async () => {
    await repo.beat(beat('orch-late', { leader: true }), true);
    await sql`update kici_instances set last_heartbeat = now() - interval '2900 milliseconds'`.execute(
      fresh.store.db,
    );
    expect((await repo.list())[0]!.state).toBe('alive');
    await sql`update kici_instances set last_heartbeat = now() - interval '3100 milliseconds'`.execute(
      fresh.store.db,
    );
    const [late] = await repo.list();
    expect([late!.state, late!.leader]).toEqual(['dead', false]);
    expect(late!.heartbeatAgeMs).toBeGreaterThanOrEqual(3100);
  });

  it('a clean stop marks the row stopped; the next start of the same id clears it', async () => {
    await repo.beat(beat('orch-s'), true);
    await repo.markStopped('orch-s');
    expect((await repo.list())[0]!.state).toBe('stopped');
    await repo.beat(beat('orch-s'));
    expect((await repo.list())[0]!.state).toBe('stopped'); // a late beat of the old life changes nothing
    await repo.beat(beat('orch-s'), true);
    const [again] = await repo.list();
    expect([again!.state, again!.stoppedAt]).toEqual(['alive', null]);
  });

  it('presence beats on its interval with fresh facts and marks itself stopped', async () => {
    let agents = 0;
    const p = new InstancePresence(
      repo,
      'orch-p',
      '1.2.3',
      100,
      {
        address: () => 'http://x:1',
        agentsConnected: () => agents,
        jobsRunning: () => 0,
        isLeader: () => false,
      },
      pino({ level: 'silent' }),
    );
    await p.start();
    agents = 4;
    await eventually(async () => (await repo.list())[0]?.agentsConnected === 4, 5_000, 'a later beat');
    await p.stop();
    expect((await repo.list())[0]!.state).toBe('stopped');
  });

  it('publishes its part of the cluster view with the beat, only when it changed; peers read it with presence', async () => {
    let agents = [{ id: 'ag-1' }];
    const part = () =>
      Promise.resolve({
        scalerStatus: { configured: false, scalers: [] },
        diagnose: { configured: false, healthy: true, scalers: [] },
        agents,
      });
    const facts = {
      address: () => 'http://x:1',
      agentsConnected: () => agents.length,
      jobsRunning: () => 0,
      isLeader: () => false,
      part,
    };
    // A long interval: every beat in this test is asked for.
    const p = new InstancePresence(repo, 'orch-v', '1.2.3', 60_000, facts, pino({ level: 'silent' }));
    await p.start();
    const ids = async () => (await repo.peerParts('other')).map((x) => [x.instance, x.state, x.part.agents]);
    expect(await ids()).toEqual([['orch-v', 'alive', [{ id: 'ag-1' }]]]);
    expect(await repo.peerParts('orch-v')).toEqual([]); // never its own

    // Unchanged: the beat leaves the stored part alone (a marker written behind its back survives).
    await sql`update kici_instances set part = '{"marker":true}'`.execute(fresh.store.db);
    await p.beat();
    expect((await repo.peerParts('other'))[0]!.part).toEqual({ marker: true });
    // Only the time passed: still not news until the part is a few beats old, then rewritten.
    for (let i = 2; i < PART_REFRESH_BEATS; i++) await p.beat();
    expect((await repo.peerParts('other'))[0]!.part).toEqual({ marker: true });
    await p.beat();
    expect(await ids()).toEqual([['orch-v', 'alive', [{ id: 'ag-1' }]]]);
    agents = [{ id: 'ag-2' }];
    await p.beat();
    expect(await ids()).toEqual([['orch-v', 'alive', [{ id: 'ag-2' }]]]);

    // A dead instance's part stays, marked dead; a clean stop takes it away.
    await sql`update kici_instances set last_heartbeat = now() - interval '1 hour'`.execute(fresh.store.db);
    expect((await ids())[0]![1]).toBe('dead');
    await p.stop();
    expect(await ids()).toEqual([]);
  });
});

describe('cluster node on the embedded store', () => {
  it('leads from start to stop; its leader work runs and is aborted on stop', async () => {
    const node = new ClusterNode({
      db: fresh.store.db,
      engine: 'pglite',
      databaseUrl: undefined,
      instanceId: 'orch-sole',
      version: '1',
      heartbeatMs: 100,
      lockTimeoutMs: 1000,
      facts: { address: () => 'http://sole', agentsConnected: () => 0, jobsRunning: () => 0 },
      log: pino({ level: 'silent' }),
    });
    await node.start();
    expect(node.lease.isLeader()).toBe(true);
    await eventually(async () => (await node.status()).instances[0]?.leader === true, 5_000, 'leader row');
    const signal = node.work.signal!;
    expect(signal.aborted).toBe(false);
    await node.stop();
    expect(signal.aborted).toBe(true);
    const [row] = (await node.status()).instances;
    expect([row!.state, row!.leader]).toEqual(['stopped', false]);
  });

  it('the stale-instance sweep clears the leader flag of a dead row only', async () => {
    await repo.beat(beat('orch-gone', { leader: true }), true);
    await repo.beat(beat('orch-live', { leader: true }), true);
    await sql`update kici_instances set last_heartbeat = now() - interval '5 seconds' where id = 'orch-gone'`.execute(
      fresh.store.db,
    );
    expect(await repo.sweepDead()).toEqual(['orch-gone']);
    const rows = await sql<{
      id: string;
      leader: boolean;
    }>`select id, leader from kici_instances order by id`.execute(fresh.store.db);
    expect(rows.rows).toEqual([
      { id: 'orch-gone', leader: false },
      { id: 'orch-live', leader: true },
    ]);
  });
});

describe('instance id', () => {
  const fromDir = () => Promise.resolve('orch-from-dir');
  it('flag, then env, then the data dir', async () => {
    expect(await resolveInstanceId('flag-1', 'env-1', fromDir)).toBe('flag-1');
    expect(await resolveInstanceId(undefined, 'env-1', fromDir)).toBe('env-1');
    expect(await resolveInstanceId(undefined, undefined, fromDir)).toBe('orch-from-dir');
  });
  it('a bad id is a user error naming where it came from', async () => {
    await expect(resolveInstanceId('has space', undefined, fromDir)).rejects.toThrow(UserError);
    await expect(resolveInstanceId(undefined, '-x', fromDir)).rejects.toThrow(/KICI_INSTANCE_ID/);
    await expect(resolveInstanceId('a'.repeat(65), undefined, fromDir)).rejects.toThrow(/--instance-id/);
  });
});

describe('kici-admin cluster status table', () => {
  it('marks the answering instance, the leader and the heartbeat age', () => {
    const text = renderClusterStatus({
      self: 'a',
      instances: [
        { ...statusOf('a'), leader: true },
        { ...statusOf('b'), state: 'dead', heartbeatAgeMs: 12_500 },
      ],
    });
    const [head, a, b] = text.split('\n');
    expect(head).toMatch(/^INSTANCE\s+ADDRESS\s+STATE\s+LEADER\s+HEARTBEAT\s+AGENTS\s+RUNNING/);
    expect(a).toMatch(/^a \(this\)\s+http:\/\/a\s+alive\s+yes\s+200ms ago\s+3\s+1/);
    expect(b).toMatch(/^b\s+http:\/\/b\s+dead\s+no\s+12\.5s ago/);
  });
});

function statusOf(id: string) {
  return {
    id,
    address: `http://${id}`,
    version: '1',
    state: 'alive' as const,
    leader: false,
    startedAt: '',
    lastHeartbeatAt: '',
    heartbeatAgeMs: 200,
    heartbeatMs: 1000,
    agentsConnected: 3,
    jobsRunning: 1,
    stoppedAt: null,
  };
}
