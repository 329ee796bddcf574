/**
 * Liveness is measured on the monotonic clock: a wall-clock step of an hour either way closes no
 * agent and makes no uptime negative; real silence still closes the connection. Driven through the
 * real agent session (PGlite store, dispatcher) with a manual clock whose wall time can be stepped.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { newConnectedAgent } from '../../../src/dispatch/agent-registry.js';
import {
  closeSilentAgents,
  MISSED_BEATS,
  SilenceWatch,
  uptimeMs,
} from '../../../src/server/heartbeat-check.js';
import { ManualClock } from '../../../src/util/clock.js';
import { DEFAULT_SPAWN_TIMEOUT_MS } from '../../../src/scaler/manager.js';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();
const HB = 10_000;
const HOUR = 3_600_000;

describe('heartbeat timeout on the monotonic clock', () => {
  it('a wall-clock step of ±1 h closes no agent; silence past three beats still does', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    const a = await h.registerStatic('box-1', ['linux']);
    const b = await h.registerStatic('box-2', ['linux']);
    for (const jump of [HOUR, -HOUR, -HOUR, HOUR]) {
      h.clock.jumpWall(jump);
      await h.advance(HB);
      await a.session!.receive({ type: 'heartbeat' });
      await b.session!.receive({ type: 'heartbeat' });
      expect(closeSilentAgents(h.d.registry.list(), h.clock, HB)).toEqual([]);
      for (const ag of [a, b]) expect(uptimeMs(ag.conn, h.clock)).toBeGreaterThan(0);
    }
    // box-2 goes quiet: closed once it misses more than three beats, not before.
    await h.advance(HB * MISSED_BEATS);
    await a.session!.receive({ type: 'heartbeat' });
    expect(closeSilentAgents(h.d.registry.list(), h.clock, HB)).toEqual([]);
    await h.advance(1);
    expect(closeSilentAgents(h.d.registry.list(), h.clock, HB)).toEqual(['box-2']);
    expect(b.conn.closedFor).toBe('heartbeat-timeout');
  });

  it('a frame counts as a sign of life when it arrives, not when the frames ahead of it are handled', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    const a = await h.registerStatic('box-1', ['linux']);
    await h.advance(HB * MISSED_BEATS);
    // Not awaited: the frame may wait behind others (a slow store write); its arrival is enough.
    const handled = a.session!.receive({ type: 'heartbeat' });
    expect(a.conn.lastSeenMono).toBe(h.clock.monotonic());
    await h.advance(HB);
    expect(closeSilentAgents(h.d.registry.list(), h.clock, HB)).toEqual([]);
    await handled;
  });

  it('property: closed exactly when monotonic silence exceeds three beats, whatever the wall clock does', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: -2 * HOUR, max: 2 * HOUR }), fc.integer({ min: 0, max: HB })), {
          maxLength: 20,
        }),
        (steps) => {
          const clock = new ManualClock();
          const closed: number[] = [];
          const agent = newConnectedAgent({
            id: 'x',
            labels: [],
            scaled: null,
            nowMs: clock.now(),
            monoMs: clock.monotonic(),
            send: () => undefined,
            close: (code) => void closed.push(code),
          });
          let silent = 0;
          for (const [jump, wait] of steps) {
            clock.jumpWall(jump);
            clock.advance(wait);
            silent += wait;
            const out = closeSilentAgents([agent], clock, HB);
            expect(out.length === 1).toBe(silent > HB * MISSED_BEATS);
            if (out.length) return;
            expect(uptimeMs(agent, clock)).toBe(silent);
          }
        },
      ),
    );
  });

  it('the spawn deadline is elapsed time: a +1 h wall step fails no spawn, real waiting still does', async () => {
    const h = await hs.make({ config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] } });
    const { ids } = await h.submit({ a: { runsOn: ['linux'] } });
    const req = h.allSpawns().find((s) => s.boundJobId === ids[0])!;
    h.backend('alpha').resolveSpawn(req.agentId);
    await h.settle();
    h.clock.jumpWall(HOUR);
    await h.sweep();
    expect(h.hooks.spawnFailed).toEqual([]);
    expect(h.manager.isProvisioning(ids[0]!)).toBe(true);
    await h.advance(DEFAULT_SPAWN_TIMEOUT_MS + 1);
    await h.sweep();
    expect(h.hooks.spawnFailed.map((f) => f.error.kind)).toEqual(['spawn-timeout']);
  });
});

function quietAgent(clock: ManualClock) {
  const closed: number[] = [];
  const agent = newConnectedAgent({
    id: 'x',
    labels: [],
    scaled: null,
    nowMs: clock.now(),
    monoMs: clock.monotonic(),
    send: () => undefined,
    close: (code) => void closed.push(code),
  });
  return { agent, closed };
}

describe('the periodic silence check after a stall of this process', () => {
  it('a check that runs late by a stall forgives the stall: beats queued meanwhile are read first', () => {
    const clock = new ManualClock();
    const watch = new SilenceWatch(clock, HB);
    const { agent, closed } = quietAgent(clock);
    // On time: one beat per interval, checked after each.
    clock.advance(HB);
    agent.heard(clock.monotonic());
    expect(watch.check([agent])).toEqual([]);
    // The process stalls for five intervals; the agent's beats wait unread in its socket.
    clock.advance(6 * HB);
    expect(watch.check([agent])).toEqual([]);
    expect(closed).toEqual([]);
    // The check without the stall allowance would have closed it.
    expect(closeSilentAgents([agent], clock, HB)).toEqual(['x']);
  });

  it('an agent that stays silent is closed by the next check on time', () => {
    const clock = new ManualClock();
    const watch = new SilenceWatch(clock, HB);
    const { agent, closed } = quietAgent(clock);
    clock.advance(6 * HB);
    expect(watch.check([agent])).toEqual([]);
    clock.advance(HB);
    expect(watch.check([agent])).toEqual(['x']);
    expect(closed).toHaveLength(1);
  });

  it('property: closed exactly when silence exceeds three beats plus the lateness of that check', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: HB, max: 5 * HB }), { minLength: 1, maxLength: 30 }), (gaps) => {
        const clock = new ManualClock();
        const watch = new SilenceWatch(clock, HB);
        const { agent } = quietAgent(clock);
        let silent = 0;
        for (const gap of gaps) {
          clock.advance(gap);
          silent += gap;
          const out = watch.check([agent]);
          expect(out.length === 1).toBe(silent > HB * MISSED_BEATS + (gap - HB));
          if (out.length) return;
        }
      }),
    );
  });
});
