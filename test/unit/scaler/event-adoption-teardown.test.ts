/**
 * Teardown by the adopter: the scale-down of an adopted event agent goes to the targets its spawner
 * recorded, whether or not the adopter configures the scaler, and the spawn row goes with it.
 */
import { describe, expect, it } from 'vitest';
import { A_TARGETS, insertRow, instanceManager, storePerTest } from '../../helpers/adoption-store.js';

const openStore = storePerTest();

describe('teardown by the adopter', () => {
  it('without the scaler configured: the scale-down goes to the targets recorded at spawn, and the row goes', async () => {
    const store = await openStore();
    await insertRow(store, 'scaler-event-down0001');
    const b = instanceManager(store, 'orch-b', { configured: false });
    await b.m.registerAgent('scaler-event-down0001');
    await b.m.onAgentDisconnected('scaler-event-down0001');
    const downs = b.emitter.downs('scaler-event-down0001');
    expect(downs).toHaveLength(1);
    expect(downs[0]).toMatchObject({
      targets: A_TARGETS,
      payload: { scalerName: 'cloud', reason: 'job-complete' },
    });
    const rows = await store.db.selectFrom('scaler_spawning_agents').selectAll().execute();
    expect(rows).toHaveLength(0);
    // The outcome outlives the row: the spawner can still tell it was adopted.
    const adopters = await b.m.adoption.adopters(['scaler-event-down0001']);
    expect(adopters.get('scaler-event-down0001')).toBe('orch-b');
    // A repeated disconnect emits nothing more.
    await b.m.onAgentDisconnected('scaler-event-down0001');
    expect(b.emitter.downs('scaler-event-down0001')).toHaveLength(1);
  });

  it('with the scaler configured (other targets here): still the recorded targets', async () => {
    const store = await openStore();
    await insertRow(store, 'scaler-event-down0002');
    const b = instanceManager(store, 'orch-b', { configured: true });
    await b.m.registerAgent('scaler-event-down0002');
    await b.m.onAgentDisconnected('scaler-event-down0002', 'heartbeat-timeout');
    const downs = b.emitter.downs('scaler-event-down0002');
    expect(downs).toHaveLength(1);
    expect(downs[0]).toMatchObject({ targets: A_TARGETS, payload: { reason: 'heartbeat-timeout' } });
    expect(b.m.state.agents.size).toBe(0);
  });
});
