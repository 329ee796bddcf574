import { describe, expect, it } from 'vitest';
import { failureReason, reasonFor, type StepOutcome } from '../../../src/jobs/failure-reason.js';

const step = (
  idx: number,
  name: string,
  exit: number | null,
  extra: Partial<StepOutcome> = {},
): StepOutcome => ({
  idx,
  name,
  exit_code: exit,
  timed_out: false,
  finished_at: exit === null ? null : new Date(0),
  ...extra,
});

describe('a failed job always has a reason', () => {
  it('names the failing step and its exit code', () => {
    expect(failureReason([step(0, 'prep', 0), step(1, 'build', 2)], 2)).toBe('step "build" exited with 2');
  });
  it('says when the failing step timed out', () => {
    expect(failureReason([step(0, 'build', null, { timed_out: true, finished_at: new Date(0) })], null)).toBe(
      'step "build" timed out',
    );
  });
  it('names a step that never finished', () => {
    expect(failureReason([step(0, 'prep', 0), step(1, 'deploy', null)], null)).toBe(
      'step "deploy" did not finish',
    );
  });
  it('falls back to the exit code when no step ran', () => {
    expect(failureReason([], 7)).toBe('the job exited with 7');
    expect(failureReason([], null)).toBe('the job failed without an exit code');
  });
  it('keeps a stored reason and leaves other states alone', () => {
    expect(reasonFor('failed', 'agent lost', [step(0, 'b', 1)], 1)).toBe('agent lost');
    expect(reasonFor('failed', null, [step(0, 'b', 1)], 1)).toBe('step "b" exited with 1');
    expect(reasonFor('succeeded', null, [step(0, 'b', 0)], 0)).toBeNull();
  });
});
