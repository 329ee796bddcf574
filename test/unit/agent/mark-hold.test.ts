import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MarkHold, type MarkHoldTimers } from '../../../src/agent/mark-hold.js';
import type { AgentMessage } from '../../../src/protocol/messages.js';

/** A clock and one-shot timers the test moves by hand. */
function manualTimers() {
  let now = 0;
  const pending: { at: number; fn: () => void; live: boolean }[] = [];
  const timers: MarkHoldTimers = {
    now: () => now,
    set: (fn, ms) => {
      const t = { at: now + ms, fn, live: true };
      pending.push(t);
      return { clear: () => (t.live = false) };
    },
  };
  const advance = (ms: number) => {
    const until = now + ms;
    for (;;) {
      const due = pending.filter((t) => t.live && t.at <= until).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      now = due.at;
      due.live = false;
      due.fn();
    }
    now = until;
  };
  return { timers, advance, now: () => now };
}

const started = (jobId: string): AgentMessage => ({ type: 'job.started', jobId });
const stepStarted = (jobId: string, idx: number): AgentMessage => ({
  type: 'step.started',
  jobId,
  idx,
  name: `s${idx}`,
});
const stepFinished = (jobId: string, idx: number): AgentMessage => ({
  type: 'step.finished',
  jobId,
  idx,
  exitCode: 0,
  timedOut: false,
  durationMs: 1,
});
const finished = (jobId: string): AgentMessage => ({
  type: 'job.finished',
  jobId,
  result: 'succeeded',
  exitCode: 0,
});
const strip = (m: AgentMessage) => {
  const { heldMs: _, ...rest } = m as AgentMessage & { heldMs?: number };
  return rest;
};

describe('MarkHold', () => {
  it("a short job's marks leave together with its result, in order, each saying how long it waited", () => {
    const t = manualTimers();
    const out: AgentMessage[] = [];
    const hold = new MarkHold((m) => out.push(m), 100, t.timers);
    hold.send(started('j'));
    t.advance(10);
    hold.send(stepStarted('j', 0));
    t.advance(30);
    hold.send(stepFinished('j', 0));
    expect(out).toEqual([]);
    t.advance(5);
    hold.send(finished('j'));
    expect(out.map((m) => m.type)).toEqual(['job.started', 'step.started', 'step.finished', 'job.finished']);
    expect(out.map((m) => (m as { heldMs?: number }).heldMs)).toEqual([45, 35, 5, undefined]);
  });

  it('a mark is released by the timer when nothing follows it within the hold', () => {
    const t = manualTimers();
    const out: AgentMessage[] = [];
    const hold = new MarkHold((m) => out.push(m), 100, t.timers);
    hold.send(started('j'));
    t.advance(99);
    expect(out).toEqual([]);
    t.advance(1);
    expect(out).toEqual([{ type: 'job.started', jobId: 'j', heldMs: 100 }]);
    // A later mark starts a hold of its own.
    hold.send(stepStarted('j', 0));
    t.advance(100);
    expect(out).toHaveLength(2);
  });

  it('a message sent in the same instant as its mark carries no heldMs; a hold of 0 holds nothing', () => {
    const t = manualTimers();
    const out: AgentMessage[] = [];
    new MarkHold((m) => out.push(m), 0, t.timers).send(started('a'));
    expect(out).toEqual([started('a')]);
    const hold = new MarkHold((m) => out.push(m), 100, t.timers);
    hold.send(started('b'));
    hold.send(finished('b'));
    expect(out.slice(1)).toEqual([started('b'), finished('b')]);
  });

  it('property: the order is kept, nothing is lost, and no mark waits longer than the hold', () => {
    const msg = fc.oneof(
      fc.constant(started('j')),
      fc.constant(stepStarted('j', 0)),
      fc.constant(stepFinished('j', 0)),
      fc.constant(finished('j')),
      fc.constant<AgentMessage>({ type: 'log', jobId: 'j', idx: 0, stream: 'stdout', lines: ['x'] }),
    );
    fc.assert(
      fc.property(
        fc.array(fc.tuple(msg, fc.integer({ min: 0, max: 150 })), { maxLength: 40 }),
        fc.integer({ min: 1, max: 200 }),
        (steps, holdMs) => {
          const t = manualTimers();
          const out: { m: AgentMessage; at: number }[] = [];
          const hold = new MarkHold((m) => out.push({ m, at: t.now() }), holdMs, t.timers);
          const sentAt: number[] = [];
          for (const [m, gap] of steps) {
            t.advance(gap);
            sentAt.push(t.now());
            hold.send(m);
          }
          t.advance(holdMs);
          expect(hold.size).toBe(0);
          expect(out.map((o) => strip(o.m))).toEqual(steps.map(([m]) => m));
          out.forEach((o, i) => {
            const waited = o.at - sentAt[i]!;
            expect(waited).toBeLessThanOrEqual(holdMs);
            const held = (o.m as { heldMs?: number }).heldMs ?? 0;
            expect(held).toBe(waited);
          });
        },
      ),
    );
  });
});
