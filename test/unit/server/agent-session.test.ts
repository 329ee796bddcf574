/**
 * The agent session: its transition table, and every refusal with its close code, driven through
 * the same AgentSession the WebSocket handler uses (real PGlite store and dispatcher).
 */
import { pino } from 'pino';
import { sql } from 'kysely';
import { describe, expect, it, vi } from 'vitest';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { CloseCodes, type OrchestratorMessage } from '../../../src/protocol/messages.js';
import { AgentSession, NOT_JSON, type AgentSessionDeps } from '../../../src/server/agent-session.js';
import type { ClaimStore } from '../../../src/server/claim-store.js';
import {
  nextState,
  REFUSAL_CODES,
  type SessionEvent,
  type SessionState,
} from '../../../src/server/session-table.js';
import { MemoryClaimStore } from '../../helpers/claim-store.js';
import { spawnToken } from '../../helpers/harness-agents.js';
import { useManagerHarnesses, type ManagerHarness } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
const config = { version: 1, scalers: [bareMetal('alpha', [['linux']])] };

interface Driven {
  session: AgentSession;
  sent: OrchestratorMessage[];
  closes: { code: number; reason: string }[];
}

function drive(h: ManagerHarness, over: Partial<AgentSessionDeps> = {}): Driven {
  const sent: OrchestratorMessage[] = [];
  const closes: { code: number; reason: string }[] = [];
  let open = true;
  const session = new AgentSession(
    h.sessionDeps(over),
    {
      send: (m) => void sent.push(m),
      close: (code, reason) => {
        open = false;
        closes.push({ code, reason });
      },
      isOpen: () => open,
    },
    'test',
  );
  return { session, sent, closes };
}

async function mint(
  h: ManagerHarness,
  agentId: string,
  labels: string[],
  kind: 'static' | 'ephemeral' = 'static',
) {
  return (await h.store.tokens.mint({ agentId, labels, kind, now: new Date(h.clock.now()) })).token;
}

const register = (agentId: string, token: string, labels: string[]) => ({
  type: 'register',
  protocol: 1,
  agentId,
  token,
  labels,
});

describe('session transition table', () => {
  const all: SessionEvent[] = [
    'claim',
    'claim.ok',
    'register',
    'register.ok',
    'job.assigned',
    'job.finished',
    'draining',
  ];
  it('walks hello → claim → register → registered ⇄ busy → leaving', () => {
    const path: [SessionEvent, SessionState][] = [
      ['claim', 'claiming'],
      ['claim.ok', 'claimed'],
      ['register', 'registering'],
      ['register.ok', 'registered'],
      ['job.assigned', 'busy'],
      ['job.finished', 'registered'],
      ['job.assigned', 'busy'],
      ['draining', 'leaving'],
    ];
    let s: SessionState = 'hello';
    for (const [ev, want] of path) {
      s = nextState(s, ev)!;
      expect(s).toBe(want);
    }
  });
  it('allows no claim after a claim, no register before the claim answer, nothing after close', () => {
    expect(nextState('claimed', 'claim')).toBeUndefined();
    expect(nextState('claiming', 'register')).toBeUndefined();
    expect(nextState('registered', 'claim')).toBeUndefined();
    expect(nextState('hello', 'job.assigned')).toBeUndefined();
    for (const ev of all) expect(nextState('closed', ev)).toBeUndefined();
  });
  it('refuse and close end every state', () => {
    for (const s of [
      'hello',
      'claiming',
      'claimed',
      'registering',
      'registered',
      'busy',
      'leaving',
    ] as const) {
      expect(nextState(s, 'refuse')).toBe('closed');
      expect(nextState(s, 'close')).toBe('closed');
    }
  });
  it('keeps the documented close codes', () => {
    expect(REFUSAL_CODES).toEqual({
      malformed: 4400,
      'register-timeout': 4400,
      'unexpected-message': 4400,
      'bad-token': 4401,
      'claim-refused': 4401,
      'no-claim-store': 4401,
      'labels-out-of-scope': 4403,
      'unknown-scaler-id': 4403,
      'no-scaler': 4403,
      'session-unproven': 4412,
      replaced: 4409,
      'shutting-down': 4503,
      'store-unavailable': 1011,
    });
  });
});

describe('session refusals keep their close codes', () => {
  /** Run one frame and return the close and the register.rejected code (if any). */
  async function refusedWith(d: Driven, frame: unknown) {
    await d.session.receive(frame);
    const rejected = d.sent.find((m) => m.type === 'register.rejected');
    return {
      close: d.closes[0]?.code,
      rejected: rejected?.type === 'register.rejected' ? rejected.code : undefined,
      state: d.session.state,
    };
  }

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

  const sessionOf = (d: Driven) => {
    const ack = d.sent.find((m) => m.type === 'register.ack');
    return ack?.type === 'register.ack' ? ack.session : undefined;
  };

  it('4409: a newer connection of the same agent (proving its session) replaces the older one', async () => {
    const h = await hs.make({ config });
    const tok = await mint(h, 'box-1', ['linux']);
    const first = drive(h);
    await first.session.receive(register('box-1', tok, ['linux']));
    expect(first.session.state).toBe('registered');
    const secret = sessionOf(first);
    expect(secret).toMatch(/^kses_/);
    const second = drive(h);
    await second.session.receive({ ...register('box-1', tok, ['linux']), session: secret });
    expect(second.session.state).toBe('registered');
    expect(first.closes[0]?.code).toBe(4409);
    // A resumed session keeps its secret: no new one is handed out.
    expect(sessionOf(second)).toBeUndefined();
  });

  it('4412: a valid token without the session proof never replaces a live session', async () => {
    const h = await hs.make({ config });
    const tok = await mint(h, 'box-1', ['linux']);
    const first = drive(h);
    await first.session.receive(register('box-1', tok, ['linux']));
    for (const proof of [undefined, 'kses_guessed']) {
      const thief = drive(h);
      const msg = { ...register('box-1', tok, ['linux']), ...(proof ? { session: proof } : {}) };
      expect(await refusedWith(thief, msg)).toMatchObject({ close: 4412, rejected: 4412 });
      expect(thief.session.refusal?.kind).toBe('session-unproven');
    }
    expect(first.closes).toEqual([]);
    expect(h.dispatcher!.registry.get('box-1')).toBe(first.session.agent);
    // Only the hash is stored.
    const row = await h.store.db.selectFrom('agent_sessions').selectAll().executeTakeFirstOrThrow();
    expect(row.secret_hash).not.toContain(sessionOf(first)!);
    expect(row.secret_hash).toMatch(/^[0-9a-f]{64}$/);
  });

  it('a static agent process that restarts (its old session gone, holding no job) opens a new session', async () => {
    const h = await hs.make({ config });
    const tok = await mint(h, 'box-1', ['linux']);
    const first = drive(h);
    await first.session.receive(register('box-1', tok, ['linux']));
    await first.session.closed();
    const restarted = drive(h);
    await restarted.session.receive(register('box-1', tok, ['linux']));
    expect(restarted.session.state).toBe('registered');
    expect(sessionOf(restarted)).not.toBe(sessionOf(first));
  });

  it("a single-use agent: no second session, and the job count is the server's, not the agent's", async () => {
    const h = await hs.make({ config });
    const b = h.backend('alpha');
    await h.submit({ a: { runsOn: ['linux'] } });
    const [id] = b.pendingIds();
    b.resolveSpawn(id!);
    await h.settle();
    const eph = spawnToken(b.requestFor(id!)!);
    const first = drive(h);
    await first.session.receive(register(id!, eph, ['linux', 'kici:scaler:alpha']));
    await h.settle();
    expect(first.sent.some((m) => m.type === 'job.assign')).toBe(true);
    const secret = sessionOf(first)!;
    // Without the proof: refused, even claiming to have done nothing.
    const thief = drive(h);
    expect(
      await refusedWith(thief, { ...register(id!, eph, ['linux', 'kici:scaler:alpha']), jobsDone: 0 }),
    ).toMatchObject({ close: 4412 });
    expect(first.closes).toEqual([]);
    // The real agent on a new connection, with its proof and a lying count: still offered nothing new.
    const back = drive(h);
    await back.session.receive({
      ...register(id!, eph, ['linux', 'kici:scaler:alpha']),
      session: secret,
      jobsDone: 0,
    });
    expect(back.session.state).not.toBe('closed');
    expect(back.session.agent?.jobsTaken).toBeGreaterThan(0);
  });

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

  it('a job moves registered → busy, its result back to registered; draining → leaving', async () => {
    const h = await hs.make({ config });
    const tok = await mint(h, 'box-1', ['linux']);
    const d = drive(h);
    await d.session.receive(register('box-1', tok, ['linux']));
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    await h.pump();
    expect(d.session.state).toBe('busy');
    await d.session.receive({ type: 'job.started', jobId: ids[0] });
    await d.session.receive({ type: 'job.finished', jobId: ids[0], result: 'succeeded', exitCode: 0 });
    expect(d.session.state).toBe('registered');
    await d.session.receive({ type: 'agent.draining' });
    expect(d.session.state).toBe('leaving');
    await d.session.closed();
    expect(d.session.state).toBe('closed');
    expect(h.dispatcher!.registry.get('box-1')).toBeUndefined();
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
