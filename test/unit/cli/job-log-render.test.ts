import { describe, expect, it } from 'vitest';
import { LogRenderer, type LogLineView, type StepView } from '../../../src/cli/admin/job-log-render.js';

const T = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();
const step = (
  idx: number,
  name: string,
  start: number,
  end: number | null,
  exitCode: number | null,
): StepView => ({
  idx,
  name,
  exitCode,
  timedOut: false,
  startedAt: T(start),
  finishedAt: end === null ? null : T(end),
  durationMs: end === null ? null : (end - start) * 1000,
});
let id = 0;
const line = (step: number | null, text: string, at: number, stream = 'stdout'): LogLineView => ({
  id: ++id,
  step,
  stream,
  line: text,
  ts: T(at),
});

describe('LogRenderer', () => {
  it('frames each step, places job-level lines by time, and closes a silent step', () => {
    const out: string[] = [];
    const r = new LogRenderer((l) => out.push(l), { totalSteps: 2 });
    const steps = [step(0, 'a', 1, 2, 0), step(1, 'b', 2, 4, 3)];
    r.feed(
      [line(null, 'spawning', 0, 'system'), line(0, 'hello', 1), line(null, 'done', 5, 'system')],
      steps,
      steps,
    );
    r.end(steps);
    expect(out).toEqual([
      '» spawning',
      '── step 1/2 "a" ──',
      'hello',
      '── step "a" exited 0 in 1.0s ──',
      '── step 2/2 "b" ──',
      '── step "b" exited 3 in 2.0s ──',
      '» done',
    ]);
  });

  it("the agent's own line stored before the step lines it follows in time still comes after them", () => {
    const out: string[] = [];
    const r = new LogRenderer((l) => out.push(l), { totalSteps: 2 });
    const steps = [step(0, 'a', 1, 2, 0), step(1, 'b', 2, 4, 3)];
    // Stored first (a lower id), but written at t=5, after both steps ended.
    const agentLine = line(null, 'agent: job failed', 5, 'system');
    r.feed([agentLine, line(0, 'one', 1), line(1, 'two', 3)], steps, steps);
    r.end(steps);
    expect(out).toEqual([
      '── step 1/2 "a" ──',
      'one',
      '── step "a" exited 0 in 1.0s ──',
      '── step 2/2 "b" ──',
      'two',
      '── step "b" exited 3 in 2.0s ──',
      '» agent: job failed',
    ]);
  });

  it('a job-level line frames no step first seen after the lines were read: its output may still come', () => {
    const out: string[] = [];
    const r = new LogRenderer((l) => out.push(l), { totalSteps: 1 });
    const done = [step(0, 'a', 1, 2, 0)];
    // The step's row showed up only after the lines were read; its own line arrives next poll.
    r.feed([line(null, 'agent: job done', 3, 'system')], [], done);
    r.feed([line(0, 'one', 1)], done, done);
    r.end(done);
    expect(out).toEqual([
      '» agent: job done',
      '── step 1/1 "a" ──',
      'one',
      '── step "a" exited 0 in 1.0s ──',
    ]);
  });

  it('across polls: a running step is not closed until it has finished', () => {
    const out: string[] = [];
    const r = new LogRenderer((l) => out.push(l), { timestamps: true, prefix: 'job | ' });
    const running = [step(0, 'a', 1, null, null)];
    r.feed([line(0, 'one', 1)], running, running);
    expect(out.at(-1)).toBe(`job | ${T(1)} one`);
    expect(out.some((l) => l.includes('exited'))).toBe(false);
    const done = [step(0, 'a', 1, 3, 0)];
    r.feed([line(0, 'two', 2)], done, done);
    expect(out.slice(-2)).toEqual([`job | ${T(2)} two`, `job | ${T(3)} ── step "a" exited 0 in 2.0s ──`]);
  });

  it('a step cut short by cancellation is marked as not finished', () => {
    const out: string[] = [];
    const r = new LogRenderer((l) => out.push(l));
    const steps = [step(0, 'long', 1, null, null)];
    r.feed([line(0, 'working', 1)], steps, steps);
    r.end(steps);
    expect(out.at(-1)).toBe('── step "long" did not finish ──');
  });
});
