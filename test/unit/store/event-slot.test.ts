/**
 * The event cap outcome the manager acts on: a second provision for one job is "in flight" (not a
 * capacity refusal, even when the cap is also full), and a database error is an outcome, with its
 * kind for the cap-lock failure counter.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { capLockFailureOf, claimEventSlot } from '../../../src/scaler/event-cap.js';
import { freshStore } from '../../helpers/data-dir.js';

let open: Awaited<ReturnType<typeof freshStore>> | undefined;
afterEach(async () => {
  await open?.close();
  open = undefined;
});

const record = (i: number, jobId: string | null = `j-${i}`) => ({
  agentId: `scaler-event-${String(i).padStart(8, '0')}`,
  scalerName: 'cloud',
  backendType: 'event',
  peerAdoptable: true,
  labelSet: ['cloud'],
  runId: null,
  boundJobId: jobId,
  ownerInstanceId: 'inst-0',
  mandatoryLabels: [],
  spawnedAt: new Date(),
});
const none = { cpus: 0, memBytes: 0 };

describe('claimEventSlot', () => {
  it('a duplicate provision is in flight, before the cap is even looked at', async () => {
    open = await freshStore();
    const db = open.store.db;
    const one = { name: 'cloud', maxAgents: 1 };
    expect(await claimEventSlot(db, one, record(1, 'j-same'), none)).toEqual({ kind: 'reserved' });
    // The cap is full now too; the job's own provision is still the answer.
    expect(await claimEventSlot(db, one, record(2, 'j-same'), none)).toMatchObject({ kind: 'in-flight' });
    expect(await claimEventSlot(db, one, record(3, 'j-other'), none)).toMatchObject({
      kind: 'at-cap',
      reason: expect.stringMatching(/1\/1/),
    });
  });

  it('a database error is a lock failure, not a throw', async () => {
    open = await freshStore();
    const db = open.store.db;
    await open.close();
    open = undefined;
    const slot = await claimEventSlot(db, { name: 'cloud', maxAgents: 5 }, record(1), none);
    expect(slot).toMatchObject({ kind: 'lock-failure', failure: 'unreachable' });
  });

  it('lock_not_available (55P03) is contention; anything else is unreachable', () => {
    expect(capLockFailureOf(Object.assign(new Error('lock timeout'), { code: '55P03' }))).toBe('contended');
    expect(capLockFailureOf(new Error('connection refused'))).toBe('unreachable');
    expect(capLockFailureOf(null)).toBe('unreachable');
  });
});
