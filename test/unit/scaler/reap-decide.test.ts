import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decideReap,
  emptyReapMemory,
  type PeerView,
  type ReapAction,
  type ReapInput,
  type ReapMemory,
  type ReapRow,
  type ReapWindows,
} from '../../../src/scaler/reap-decide.js';

const W: ReapWindows = {
  spawnTimeoutMs: 300,
  strandedTimeoutMs: 5_000,
  flapGraceMs: 1_000,
  reattemptIntervalMs: 2_000,
};
const SELF = 'orch-a';
const PEERS = ['orch-b', 'orch-c'];

const rowArb = (i: number): fc.Arbitrary<ReapRow> =>
  fc.record({
    agentId: fc.constant(`agent-${i}`),
    scalerName: fc.constant('cloud'),
    ownerInstanceId: fc.constantFrom<string | null>(SELF, 'orch-b', 'orch-c', 'orch-gone', null),
    adoptedBy: fc.constantFrom<string | null>(null, null, SELF, 'orch-b', 'orch-gone'),
    registered: fc.boolean(),
    ageMs: fc.constant(0),
    boundJobEnded: fc.boolean(),
  });

/** One pass: time advanced, which agents are seen, which peers answer, whether attempts succeed. */
const passArb = fc.record({
  advanceMs: fc.integer({ min: 0, max: 1_500 }),
  seen: fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
  alive: fc.array(fc.boolean(), { minLength: 2, maxLength: 2 }),
  attemptSucceeds: fc.boolean(),
});

const scenarioArb = fc.record({
  rows: fc.tuple(rowArb(0), rowArb(1), rowArb(2), rowArb(3)),
  passes: fc.array(passArb, { minLength: 1, maxLength: 40 }),
  knownPeers: fc.integer({ min: 0, max: 2 }),
});

interface Step {
  input: ReapInput;
  actions: ReapAction[];
  blocked: boolean;
}

type Scenario = typeof scenarioArb extends fc.Arbitrary<infer T> ? T : never;

function simulate(s: Scenario): Step[] {
  let rows = [...s.rows];
  const born = 0;
  let now = 0;
  let memory: ReapMemory = emptyReapMemory();
  const steps: Step[] = [];
  for (const p of s.passes) {
    now += p.advanceMs;
    const peers = new Map<string, PeerView>(
      PEERS.map((id, i) => [id, { alive: p.alive[i]!, silentMs: p.alive[i] ? 0 : 10_000 }]),
    );
    const seen = new Set(rows.filter((r) => p.seen[Number(r.agentId.slice(6))]).map((r) => r.agentId));
    const input: ReapInput = {
      nowMono: now,
      selfId: SELF,
      rows: rows.map((r) => ({ ...r, ageMs: now - born })),
      seen,
      peers,
      knownPeers: s.knownPeers,
      windows: W,
    };
    const d = decideReap(input, memory);
    memory = d.memory;
    steps.push({ input, actions: d.actions, blocked: d.blocked });
    if (p.attemptSucceeds) {
      const gone = new Set(d.actions.flatMap((a) => (a.kind === 'reap' ? [a.agentId] : [])));
      rows = rows.filter((r) => !gone.has(r.agentId));
    }
  }
  return steps;
}

const reaps = (st: Step) => st.actions.filter((a) => a.kind === 'reap');

describe('the reaper decision', () => {
  it('never reaps while it sees none of the peers it knows', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        for (const st of simulate(s)) {
          const cutOff = st.input.knownPeers > 0 && ![...st.input.peers.values()].some((p) => p.alive);
          expect(st.blocked).toBe(cutOff);
          if (cutOff) expect(reaps(st)).toEqual([]);
        }
      }),
    );
  });

  it('never reaps a provision unseen for less than the flap grace, counted since the last sighting or partition', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        // The test's own account of each agent's continuous absence.
        const since = new Map<string, number>();
        for (const st of simulate(s)) {
          for (const r of st.input.rows) {
            if (st.blocked || st.input.seen.has(r.agentId)) since.delete(r.agentId);
            else if (!since.has(r.agentId)) since.set(r.agentId, st.input.nowMono);
          }
          for (const a of reaps(st)) {
            expect(st.input.seen.has(a.agentId)).toBe(false);
            const from = since.get(a.agentId);
            expect(from).toBeDefined();
            expect(st.input.nowMono - from!).toBeGreaterThanOrEqual(W.flapGraceMs);
          }
        }
      }),
    );
  });

  it('tears a provision down at most once, and a failed attempt is not retried within the throttle', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        const last = new Map<string, number>();
        for (const st of simulate(s)) {
          const ids = reaps(st).map((a) => a.agentId);
          expect(new Set(ids).size).toBe(ids.length);
          for (const id of ids) {
            const prev = last.get(id);
            if (prev !== undefined)
              expect(st.input.nowMono - prev).toBeGreaterThanOrEqual(W.reattemptIntervalMs);
            last.set(id, st.input.nowMono);
          }
        }
      }),
    );
  });

  it('a provision whose holder is live is reaped only once stranded', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        for (const st of simulate(s))
          for (const a of reaps(st)) {
            if (a.reason !== 'heartbeat-timeout' || a.holder === null) continue;
            const peer = st.input.peers.get(a.holder);
            const live = a.holder === SELF || (peer !== undefined && peer.alive);
            if (live) expect(a.unseenMs).toBeGreaterThanOrEqual(W.strandedTimeoutMs);
          }
      }),
    );
  });
});

describe('the reaper decision, by example', () => {
  const row: ReapRow = {
    agentId: 'agent-x',
    scalerName: 'cloud',
    ownerInstanceId: 'orch-c',
    adoptedBy: null,
    registered: true,
    ageMs: 0,
    boundJobEnded: false,
  };
  const input = (nowMono: number, alive: Record<string, boolean>, over: Partial<ReapInput> = {}) => ({
    nowMono,
    selfId: SELF,
    rows: [row],
    seen: new Set<string>(),
    peers: new Map(Object.entries(alive).map(([id, a]) => [id, { alive: a, silentMs: a ? 0 : 60_000 }])),
    knownPeers: 2,
    windows: W,
    ...over,
  });

  it('a registered provision of a dead owner: clock, grace, one heartbeat-timeout; a flap resets the clock', () => {
    let m = emptyReapMemory();
    let d = decideReap(input(0, { 'orch-b': true, 'orch-c': false }), m);
    expect(d.actions).toEqual([{ kind: 'clock-started', agentId: 'agent-x' }]);
    m = d.memory;
    d = decideReap(input(500, { 'orch-b': true, 'orch-c': false }, { seen: new Set(['agent-x']) }), m);
    expect(d.actions).toEqual([{ kind: 'clock-cleared', agentId: 'agent-x', unseenMs: 500 }]);
    m = d.memory;
    d = decideReap(input(900, { 'orch-b': true, 'orch-c': false }), m);
    m = d.memory;
    d = decideReap(input(1_800, { 'orch-b': true, 'orch-c': false }), m);
    expect(d.actions).toEqual([]);
    expect(d.unseen).toBe(0);
    m = d.memory;
    d = decideReap(input(1_900, { 'orch-b': true, 'orch-c': false }), m);
    expect(d.actions).toEqual([
      {
        kind: 'reap',
        agentId: 'agent-x',
        scalerName: 'cloud',
        reason: 'heartbeat-timeout',
        holder: 'orch-c',
        unseenMs: 1_000,
      },
    ]);
    expect(d.unseen).toBe(1);
  });

  it('cut off from every peer: blocked, the clocks are dropped, nothing is reaped', () => {
    let d = decideReap(input(0, { 'orch-b': true, 'orch-c': false }), emptyReapMemory());
    d = decideReap(input(5_000, { 'orch-b': false, 'orch-c': false }), d.memory);
    expect(d.blocked).toBe(true);
    expect(d.actions).toEqual([{ kind: 'blocked', blocked: true, knownPeers: 2 }]);
    d = decideReap(input(6_000, { 'orch-b': true, 'orch-c': false }), d.memory);
    expect(d.actions).toEqual([
      { kind: 'blocked', blocked: false, knownPeers: 2 },
      { kind: 'clock-started', agentId: 'agent-x' },
    ]);
  });

  it('a young unregistered provision is not a candidate; a row without an owner is warned about once', () => {
    const young = { ...row, registered: false, ownerInstanceId: SELF };
    let d = decideReap(input(0, { 'orch-b': true }, { rows: [young] }), emptyReapMemory());
    expect(d.actions).toEqual([]);
    const orphan = { ...row, registered: false, ownerInstanceId: null, ageMs: 10_000 };
    d = decideReap(input(0, { 'orch-b': true }, { rows: [orphan] }), emptyReapMemory());
    d = decideReap(input(2_000, { 'orch-b': true }, { rows: [orphan] }), d.memory);
    expect(d.actions).toEqual([{ kind: 'unowned', agentId: 'agent-x' }]);
    d = decideReap(input(3_000, { 'orch-b': true }, { rows: [orphan] }), d.memory);
    expect(d.actions).toEqual([]);
  });
});
