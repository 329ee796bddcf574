/**
 * Every refusal of the agent session with its close code (and its register.rejected code), driven
 * through the same AgentSession the WebSocket handler uses (real PGlite store and dispatcher); and
 * a claim code, answered once.
 */
import { pino } from 'pino';
import { sql } from 'kysely';
import { describe, expect, it, vi } from 'vitest';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { NOT_JSON } from '../../../src/server/agent-session.js';
import type { ClaimStore } from '../../../src/server/claim-store.js';
import { MemoryClaimStore } from '../../helpers/claim-store.js';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';
import { alphaConfig as config, drive, mint, refusedWith, register } from '../../helpers/session-driver.js';

const hs = useManagerHarnesses();

describe('session refusals keep their close codes', () => {
  it('4400: not JSON, an invalid register, a second claim, no register in time', async () => {
    const h = await hs.make({ config });
    expect(await refusedWith(drive(h), NOT_JSON)).toEqual({ close: 4400, rejected: 4400, state: 'closed' });
    expect(await refusedWith(drive(h), { type: 'register' })).toMatchObject({ close: 4400, rejected: 4400 });
    const claims = new MemoryClaimStore(h.store);
    claims.add('c1', { agentId: 'claimed-1', labels: ['linux'], expiresAtMs: h.clock.now() + 60_000 });
    const twice = drive(h, { claimStore: claims });
    await twice.session.receive({ type: 'claim', protocol: 1, code: 'c1' });
    expect(twice.session.state).toBe('claimed');
    expect(await refusedWith(twice, { type: 'claim', protocol: 1, code: 'c1' })).toMatchObject({
      close: 4400,
    });
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const slow = drive(h);
      vi.advanceTimersByTime(10_000);
      expect(slow.closes[0]?.code).toBe(4400);
      expect(slow.session.refusal?.kind).toBe('register-timeout');
    } finally {
      vi.useRealTimers();
    }
  });

  it('4401: unknown token, a token for another id, a refused claim, a claim without a store', async () => {
    const h = await hs.make({ config });
    expect(await refusedWith(drive(h), register('box-1', 'kici_nope', ['linux']))).toMatchObject({
      close: 4401,
      rejected: 4401,
    });
    const other = await mint(h, 'box-2', ['linux']);
    expect(await refusedWith(drive(h), register('box-1', other, ['linux']))).toMatchObject({ close: 4401 });
    const claims = new MemoryClaimStore(h.store);
    expect(
      await refusedWith(drive(h, { claimStore: claims }), { type: 'claim', protocol: 1, code: 'nope' }),
    ).toMatchObject({ close: 4401, rejected: 4401 });
    const none = drive(h);
    expect(await refusedWith(none, { type: 'claim', protocol: 1, code: 'x' })).toMatchObject({ close: 4401 });
    expect(none.session.refusal?.reason).toMatch(/no claim store/);
  });

  it('4403: labels outside the scope, an unknown scaler- id, a scaler agent with no scaler', async () => {
    const h = await hs.make({ config });
    const tok = await mint(h, 'box-1', ['linux']);
    expect(await refusedWith(drive(h), register('box-1', tok, ['linux', 'gpu']))).toMatchObject({
      close: 4403,
      rejected: 4403,
    });
    const id = 'scaler-bare-metal-0badf00d';
    const eph = await mint(h, id, ['linux', 'kici:scaler:alpha'], 'ephemeral');
    expect(await refusedWith(drive(h), register(id, eph, ['linux', 'kici:scaler:alpha']))).toMatchObject({
      close: 4403,
    });
    const bare = new Dispatcher({ store: h.store, clock: h.clock, logger: pino({ level: 'silent' }) });
    try {
      expect(await refusedWith(drive(h, { dispatcher: bare }), register(id, eph, ['linux']))).toMatchObject({
        close: 4403,
      });
    } finally {
      await bare.stop();
    }
  });

  it('4503 while stopping; 1011 when the claim store fails', async () => {
    const h = await hs.make({ config });
    const tok = await mint(h, 'box-1', ['linux']);
    expect(
      await refusedWith(drive(h, { isStopping: () => true }), register('box-1', tok, ['linux'])),
    ).toMatchObject({ close: 4503, rejected: 4503 });
    const broken: ClaimStore = { redeem: () => Promise.reject(new Error('disk gone')) };
    expect(
      await refusedWith(drive(h, { claimStore: broken }), { type: 'claim', protocol: 1, code: 'x' }),
    ).toEqual({ close: 1011, rejected: undefined, state: 'closed' });
  });

  it('1011 when the spawn-record lookup of a scaler agent fails: counted, and nothing is reaped', async () => {
    const h = await hs.make({ config });
    const id = 'scaler-event-0badf00d';
    await h.store.db
      .insertInto('scaler_spawning_agents')
      .values({
        agent_id: id,
        scaler_name: 'cloud',
        backend_type: 'event',
        peer_adoptable: true,
        label_set: '["linux"]',
        run_id: null,
        bound_job_id: null,
        owner_instance_id: 'a-peer',
        backend_ref: id,
        mandatory_labels: '[]',
        spawned_at: new Date(),
      })
      .execute();
    // The database itself fails the adoption's conditional update.
    await sql`create function kici_session_fail() returns trigger language plpgsql as $$
      begin raise exception 'disk gone'; end $$`.execute(h.store.db);
    await sql`create trigger kici_session_fail before update on scaler_spawning_agents
      for each row execute function kici_session_fail()`.execute(h.store.db);
    try {
      const eph = await mint(h, id, ['linux', 'kici:scaler:alpha'], 'ephemeral');
      const d = drive(h);
      expect(await refusedWith(d, register(id, eph, ['linux', 'kici:scaler:alpha']))).toMatchObject({
        close: 1011,
      });
      expect(d.closes[0]?.reason).toBe('Scaler state unavailable');
      expect(h.manager.adoptionLookupFailures).toBe(1);
      // A store hiccup is no evidence that the agent is an orphan.
      expect(h.backend('alpha').reaps).toEqual([]);
    } finally {
      await sql`drop trigger kici_session_fail on scaler_spawning_agents`.execute(h.store.db);
      await sql`drop function kici_session_fail()`.execute(h.store.db);
    }
  });

  it('a claim answers the id and a token that registers; the code is single-use', async () => {
    const h = await hs.make({ config });
    const claims = new MemoryClaimStore(h.store);
    claims.add('c1', { agentId: 'claimed-1', labels: ['linux'], expiresAtMs: h.clock.now() + 60_000 });
    const d = drive(h, { claimStore: claims });
    await d.session.receive({ type: 'claim', protocol: 1, code: 'c1' });
    const ack = d.sent.find((m) => m.type === 'claim.ack');
    expect(ack).toMatchObject({ agentId: 'claimed-1', labels: ['linux'] });
    await d.session.receive(register('claimed-1', (ack as { token: string }).token, ['linux']));
    expect(d.session.state).toBe('registered');
    expect(d.sent.some((m) => m.type === 'register.ack')).toBe(true);
    const again = drive(h, { claimStore: claims });
    await again.session.receive({ type: 'claim', protocol: 1, code: 'c1' });
    expect(again.closes[0]?.code).toBe(4401);
    expect(again.session.refusal?.reason).toMatch(/already used/);
    claims.add('old', { agentId: 'claimed-2', labels: ['linux'], expiresAtMs: h.clock.now() });
    const late = drive(h, { claimStore: claims });
    await late.session.receive({ type: 'claim', protocol: 1, code: 'old' });
    expect(late.session.refusal?.reason).toMatch(/expired/);
  });

  it('a refused scaler- id is reaped by the backend its kici:scaler: label names, else by each local one', async () => {
    const h = await hs.make({
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']]), bareMetal('beta', [['mac']])] },
    });
    const id = 'scaler-bare-metal-0badf00d';
    const named = await mint(h, id, ['linux', 'kici:scaler:beta'], 'ephemeral');
    await drive(h).session.receive(register(id, named, ['linux', 'kici:scaler:beta']));
    expect(h.backend('beta').reaps).toEqual([{ agentId: id, backendRef: null }]);
    expect(h.backend('alpha').reaps).toEqual([]);
    const other = 'scaler-bare-metal-0badf00e';
    const unnamed = await mint(h, other, ['linux'], 'ephemeral');
    await drive(h).session.receive(register(other, unnamed, ['linux']));
    expect(h.backend('alpha').reaps).toEqual([{ agentId: other, backendRef: null }]);
    expect(h.backend('beta').reaps.map((r) => r.agentId)).toEqual([id, other]);
  });
});
