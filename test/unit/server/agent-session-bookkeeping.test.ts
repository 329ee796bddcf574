/**
 * A bound single-use agent's bookkeeping (the agents row, the token's last use, the job count),
 * held from its job.assign until its first step started, and released by a result or a close.
 */
import { describe, expect, it } from 'vitest';
import { CloseCodes } from '../../../src/protocol/messages.js';
import { spawnToken } from '../../helpers/harness-agents.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { alphaConfig as config, drive, register } from '../../helpers/session-driver.js';

const hs = useManagerHarnesses();

describe('session refusals keep their close codes', () => {
  /**
   * The bookkeeping a job's start does not depend on (the agents row, the token's last use, the
   * job count) is held from the job.assign until the job's first step has started (held-bookkeeping.ts).
   * Read through the store, whose single connection answers in the order statements were issued.
   */
  async function bookkeeping(h: ManagerHarness, agentId: string) {
    const token = await h.store.db
      .selectFrom('agent_tokens')
      .select('last_used_at')
      .where('agent_id', '=', agentId)
      .executeTakeFirst();
    const session = await h.store.db
      .selectFrom('agent_sessions')
      .select('jobs_taken')
      .where('agent_id', '=', agentId)
      .executeTakeFirst();
    const row = await h.store.db
      .selectFrom('agents')
      .select('state')
      .where('id', '=', agentId)
      .executeTakeFirst();
    return { stamped: token?.last_used_at != null, jobsTaken: session?.jobs_taken, row: row?.state };
  }

  async function boundAgent(h: ManagerHarness) {
    const b = h.backend('alpha');
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    const [id] = b.pendingIds();
    b.resolveSpawn(id!);
    await h.settle();
    const d = drive(h);
    await d.session.receive(register(id!, spawnToken(b.requestFor(id!)!), ['linux', 'kici:scaler:alpha']));
    await h.settle();
    expect(d.sent.map((m) => m.type)).toEqual(['register.ack', 'job.assign']);
    return { d, agentId: id!, jobId: ids[0]! };
  }

  it("holds a single-use agent's bookkeeping from its job.assign until its first step started", async () => {
    const h = await hs.make({ config });
    const { d, agentId, jobId } = await boundAgent(h);
    const held = { stamped: false, jobsTaken: 0, row: undefined };
    expect(await bookkeeping(h, agentId)).toEqual(held);
    await d.session.receive({ type: 'job.started', jobId });
    expect(await bookkeeping(h, agentId)).toEqual(held);
    await d.session.receive({ type: 'step.started', jobId, idx: 0, name: 'one' });
    expect(await bookkeeping(h, agentId)).toEqual({ stamped: true, jobsTaken: 1, row: 'connected' });
  });

  it('releases the held bookkeeping on a result, or on the close (the agent then not recorded as connected)', async () => {
    const h = await hs.make({ config });
    const first = await boundAgent(h);
    await first.d.session.receive({
      type: 'job.finished',
      jobId: first.jobId,
      result: 'succeeded',
      exitCode: 0,
    });
    expect(await bookkeeping(h, first.agentId)).toEqual({ stamped: true, jobsTaken: 1, row: 'connected' });
    const second = await boundAgent(h);
    await second.d.session.closed();
    expect(await bookkeeping(h, second.agentId)).toEqual({ stamped: true, jobsTaken: 1, row: undefined });
  });

  it('releases the held bookkeeping as soon as the server closes the connection (its shutdown closes the store next)', async () => {
    const h = await hs.make({ config });
    const { d, agentId } = await boundAgent(h);
    h.dispatcher!.registry.get(agentId)!.close(CloseCodes.shuttingDown, 'orchestrator shutting down');
    expect(d.closes).toEqual([{ code: CloseCodes.shuttingDown, reason: 'orchestrator shutting down' }]);
    // No transport close has been handled yet: the writes went with the server's own close.
    expect(d.session.state).not.toBe('closed');
    expect(await bookkeeping(h, agentId)).toEqual({ stamped: true, jobsTaken: 1, row: 'connected' });
  });
});
