/**
 * The session proof: a newer connection of an agent replaces the live one only by presenting the
 * session secret its registration was given (4409), never on its token alone (4412); a restarted
 * static agent opens a new session; a single-use agent never gets a second one.
 */
import { describe, expect, it } from 'vitest';
import { spawnToken } from '../../helpers/harness-agents.js';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import {
  alphaConfig as config,
  drive,
  mint,
  refusedWith,
  register,
  type Driven,
} from '../../helpers/session-driver.js';

const hs = useManagerHarnesses();

describe('session refusals keep their close codes', () => {
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
});
