import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NewJob } from '../../../src/store/jobs-repo.js';
import type { Store } from '../../../src/store/index.js';
import { freshStore } from '../../helpers/data-dir.js';

// One database per file; every test works on its own ids.
let store: Store;
let close: () => Promise<void>;
beforeAll(async () => {
  ({ store, close } = await freshStore());
});
afterAll(async () => close());

let counter = 0;
const uid = (p: string) => `${p}-${++counter}`;

const T0 = new Date('2025-03-01T10:00:00.000Z');
const at = (s: number) => new Date(T0.getTime() + s * 1000);

function newJob(id: string, extra: Partial<NewJob> = {}): NewJob {
  return { id, name: `name-${id}`, runsOn: ['linux'], spec: { steps: [{ run: `echo ${id}` }] }, ...extra };
}

async function oneJob(): Promise<string> {
  const id = uid('job');
  await store.jobs.insertRun({ id: `run-${id}`, name: null }, [newJob(id)], T0);
  return id;
}

describe('JobsRepo.insertRun', () => {
  it('stores 1,200 jobs in one call in submission order', async () => {
    // Ids that do not sort in submission order, so order can only come from seq.
    const jobs = Array.from({ length: 1200 }, (_, i) =>
      newJob(`big-${((i * 7919) % 1200).toString().padStart(4, '0')}-${i}`, {
        runsOn: [`l${i % 3}`],
        spec: { i },
      }),
    );
    const runId = uid('big');
    const before = new Set((await store.jobs.listOpen()).map((r) => r.id));
    const rows = await store.jobs.insertRun({ id: runId, name: 'big run' }, jobs, T0);
    expect(rows.map((r) => r.id)).toEqual(jobs.map((j) => j.id));
    const seqs = rows.map((r) => BigInt(r.seq));
    for (let i = 1; i < seqs.length; i++) expect(seqs[i]! > seqs[i - 1]!).toBe(true);

    const open = (await store.jobs.listOpen()).filter((r) => !before.has(r.id));
    expect(open.map((r) => r.id)).toEqual(jobs.map((j) => j.id));
    expect(await store.jobs.countByState(runId)).toEqual({ queued: 1200 });

    const r500 = rows[500]!;
    expect(r500).toMatchObject({ run_id: runId, state: 'queued', agent_id: null, attempts: 0 });
    expect(r500.runs_on).toEqual([`l${500 % 3}`]);
    expect(r500.spec).toEqual({ i: 500 });
    expect(r500.created_at.getTime()).toBe(T0.getTime());
  });

  it('keeps later runs after earlier ones', async () => {
    const [a1, a2, b1] = [uid('a'), uid('a'), uid('b')];
    const a = await store.jobs.insertRun({ id: uid('ra'), name: null }, [newJob(a1), newJob(a2)], T0);
    const b = await store.jobs.insertRun({ id: uid('rb'), name: null }, [newJob(b1)], at(1));
    expect(BigInt(b[0]!.seq) > BigInt(a[1]!.seq)).toBe(true);
    const mine = new Set([a1, a2, b1]);
    expect((await store.jobs.listOpen()).map((r) => r.id).filter((id) => mine.has(id))).toEqual([a1, a2, b1]);
  });

  it('writes nothing when any job of the run fails to insert', async () => {
    const taken = await oneJob();
    const doomed = uid('doomed');
    // The clash sits in the second chunk of 500, after the first chunk went in.
    const jobs = [...Array.from({ length: 600 }, (_, i) => newJob(`${doomed}-${i}`)), newJob(taken)];
    await expect(store.jobs.insertRun({ id: doomed, name: null }, jobs, T0)).rejects.toThrow();
    expect(await store.jobs.list({ runId: doomed })).toEqual([]);
    expect(await store.jobs.get(`${doomed}-0`)).toBeUndefined();
    expect(await store.db.selectFrom('runs').selectAll().where('id', '=', doomed).execute()).toEqual([]);
  });
});

describe('JobsRepo.claim', () => {
  it('hands a job to exactly one of many agents claiming it at once', async () => {
    const id = await oneJob();
    const agents = Array.from({ length: 25 }, (_, i) => `agent-${i}`);
    const results = await Promise.all(agents.map((a) => store.jobs.claim(id, a, at(1))));
    expect(results.filter(Boolean)).toHaveLength(1);
    const winner = agents[results.indexOf(true)]!;
    const row = (await store.jobs.get(id))!;
    expect(row).toMatchObject({ state: 'dispatched', agent_id: winner, attempts: 1 });
    expect(row.dispatched_at?.getTime()).toBe(at(1).getTime());
  });

  it('refuses a job that is not queued or does not exist', async () => {
    const id = await oneJob();
    expect(await store.jobs.claim(uid('missing'), 'a', T0)).toBe(false);
    expect(await store.jobs.claim(id, 'a', T0)).toBe(true);
    expect(await store.jobs.claim(id, 'a', T0)).toBe(false);
    await store.jobs.finish(id, 'cancelled', {}, at(1));
    expect(await store.jobs.claim(id, 'b', at(2))).toBe(false);
  });

  it('counts attempts across requeues', async () => {
    const id = await oneJob();
    expect(await store.jobs.claim(id, 'a', T0)).toBe(true);
    expect(await store.jobs.requeue(id, 'a')).toBe(true);
    expect(await store.jobs.claim(id, 'b', at(1))).toBe(true);
    expect((await store.jobs.get(id))!).toMatchObject({ attempts: 2, agent_id: 'b' });
  });
});

describe('JobsRepo.requeue', () => {
  it('returns a dispatched job to the queue only for the agent that holds it', async () => {
    const id = await oneJob();
    await store.jobs.claim(id, 'a', T0);
    expect(await store.jobs.requeue(id, 'b')).toBe(false);
    expect((await store.jobs.get(id))!.state).toBe('dispatched');
    expect(await store.jobs.requeue(id, 'a')).toBe(true);
    const row = (await store.jobs.get(id))!;
    expect(row).toMatchObject({ state: 'queued', agent_id: null, dispatched_at: null });
    expect(await store.jobs.requeue(id, 'a')).toBe(false);
  });

  it('never requeues a job that started running or is queued', async () => {
    const id = await oneJob();
    expect(await store.jobs.requeue(id, 'a')).toBe(false);
    await store.jobs.claim(id, 'a', T0);
    await store.jobs.markRunning(id, 'a', at(1));
    expect(await store.jobs.requeue(id, 'a')).toBe(false);
    expect((await store.jobs.get(id))!).toMatchObject({ state: 'running', agent_id: 'a' });
  });
});

describe('JobsRepo.markRunning', () => {
  it('moves dispatched to running for the holding agent only, once', async () => {
    const id = await oneJob();
    expect(await store.jobs.markRunning(id, 'a', T0)).toBe(false);
    await store.jobs.claim(id, 'a', T0);
    expect(await store.jobs.markRunning(id, 'b', at(1))).toBe(false);
    expect(await store.jobs.markRunning(id, 'a', at(2))).toBe(true);
    expect(await store.jobs.markRunning(id, 'a', at(3))).toBe(false);
    const row = (await store.jobs.get(id))!;
    expect(row.state).toBe('running');
    expect(row.started_at?.getTime()).toBe(at(2).getTime());
  });
});

describe('JobsRepo.finish', () => {
  it.each(['queued', 'dispatched', 'running'] as const)('settles a %s job once', async (from) => {
    const id = await oneJob();
    if (from !== 'queued') await store.jobs.claim(id, 'a', T0);
    if (from === 'running') await store.jobs.markRunning(id, 'a', T0);
    expect(await store.jobs.finish(id, 'failed', { exitCode: 3, reason: 'step 1 failed' }, at(5))).toBe(true);
    expect(await store.jobs.finish(id, 'succeeded', { exitCode: 0 }, at(6))).toBe(false);
    const row = (await store.jobs.get(id))!;
    expect(row).toMatchObject({ state: 'failed', exit_code: 3, reason: 'step 1 failed' });
    expect(row.finished_at?.getTime()).toBe(at(5).getTime());
  });

  it('lets exactly one of several concurrent settlements win', async () => {
    const id = await oneJob();
    await store.jobs.claim(id, 'a', T0);
    const outcomes = ['succeeded', 'failed', 'cancelled', 'timed-out'] as const;
    const results = await Promise.all(
      outcomes.map((s, i) => store.jobs.finish(id, s, { exitCode: i }, at(i))),
    );
    expect(results.filter(Boolean)).toHaveLength(1);
    const winner = results.indexOf(true);
    expect((await store.jobs.get(id))!).toMatchObject({ state: outcomes[winner], exit_code: winner });
  });

  it('checks the agent when one is given', async () => {
    const id = await oneJob();
    await store.jobs.claim(id, 'a', T0);
    expect(await store.jobs.finish(id, 'succeeded', { exitCode: 0, agentId: 'intruder' }, at(1))).toBe(false);
    expect((await store.jobs.get(id))!.state).toBe('dispatched');
    expect(await store.jobs.finish(id, 'succeeded', { exitCode: 0, agentId: 'a' }, at(1))).toBe(true);
  });

  it('does not touch exit code or reason it was not given', async () => {
    const id = await oneJob();
    await store.jobs.finish(id, 'no-backend', { reason: 'no label set matches' }, T0);
    expect((await store.jobs.get(id))!).toMatchObject({
      state: 'no-backend',
      exit_code: null,
      reason: 'no label set matches',
    });
  });

  it('is false for an unknown job', async () => {
    expect(await store.jobs.finish(uid('ghost'), 'cancelled', {}, T0)).toBe(false);
  });
});

describe('JobsRepo queries', () => {
  it('lists by state and run, newest first, and counts by state', async () => {
    // Unfiltered lists see the whole table, so this test gets a database of its own.
    const own = await freshStore();
    const store = own.store;
    try {
      await store.jobs.insertRun({ id: 'r1', name: null }, [newJob('a'), newJob('b'), newJob('c')], T0);
      await store.jobs.insertRun({ id: 'r2', name: null }, [newJob('d')], T0);
      await store.jobs.claim('b', 'x', T0);
      await store.jobs.finish('c', 'succeeded', { exitCode: 0 }, T0);
      expect((await store.jobs.list({ runId: 'r1' })).map((r) => r.id)).toEqual(['c', 'b', 'a']);
      expect((await store.jobs.list({ state: 'queued' })).map((r) => r.id)).toEqual(['d', 'a']);
      expect((await store.jobs.list({ limit: 2 })).map((r) => r.id)).toEqual(['d', 'c']);
      expect((await store.jobs.listOpen()).map((r) => r.id)).toEqual(['a', 'b', 'd']);
      expect(await store.jobs.countByState('r1')).toEqual({ queued: 1, dispatched: 1, succeeded: 1 });
    } finally {
      await own.close();
    }
  });

  it('records a provisioning error only while the job is queued', async () => {
    const id = await oneJob();
    await store.jobs.setProvisioningError(id, 'image pull failed');
    expect((await store.jobs.get(id))!.last_provisioning_error).toBe('image pull failed');
    await store.jobs.claim(id, 'a', T0);
    await store.jobs.setProvisioningError(id, 'later');
    expect((await store.jobs.get(id))!.last_provisioning_error).toBe('image pull failed');
  });
});
