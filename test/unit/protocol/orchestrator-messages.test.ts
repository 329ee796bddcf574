import { describe, expect, it } from 'vitest';
import { parseOrchestratorMessage } from '../../../src/protocol/orchestrator-messages.js';

const job = {
  id: 'j-1',
  runId: 'r-1',
  name: 'build',
  steps: [{ name: 's', run: 'true', env: { A: '1' }, timeoutSeconds: 5 }],
  env: {},
};
const ack = {
  type: 'register.ack',
  agentId: 'a',
  labels: ['x'],
  scalerManaged: false,
  pendingDispatch: false,
  warmPool: false,
  heartbeatIntervalMs: 10_000,
};

describe('the agent checks what the orchestrator sends', () => {
  it.each([
    ack,
    { ...ack, resumeJobId: 'j-1', acksResults: true },
    { type: 'register.rejected', code: 4401, reason: 'no' },
    { type: 'job.assign', job },
    { type: 'job.assign', job: { ...job, timeoutSeconds: 60, container: { image: 'alpine' } } },
    { type: 'job.cancel', jobId: 'j-1', reason: 'op' },
    { type: 'heartbeat.ack' },
    { type: 'job.finished.ack', jobId: 'j-1' },
    { type: 'shutdown', reason: 'bye' },
  ])('accepts a valid $type', (msg) => {
    expect(parseOrchestratorMessage(JSON.stringify(msg))).toEqual({ ok: true, msg });
  });

  it.each([
    ['not json', 'message is not JSON'],
    ['[1]', '(message): must be an object'],
    ['null', '(message): must be an object'],
    [JSON.stringify({ type: 'nope' }), 'type: unknown message type'],
    [JSON.stringify({ ...ack, heartbeatIntervalMs: 0 }), 'heartbeatIntervalMs'],
    [JSON.stringify({ ...ack, labels: [1] }), 'labels'],
    [JSON.stringify({ type: 'job.cancel', jobId: 5, reason: 'x' }), 'jobId'],
    [JSON.stringify({ type: 'job.assign' }), 'job: must be an object'],
  ])('refuses %s, naming the field', (text, problem) => {
    const res = parseOrchestratorMessage(text);
    expect(res.ok).toBe(false);
    if (!res.ok) expect(res.problem).toContain(problem);
  });

  it.each([
    [{ ...job, steps: [] }, 'job.steps'],
    [{ ...job, steps: [{ name: 's' }] }, 'job.steps[0].run'],
    [{ ...job, steps: [{ name: 's', run: 'x', env: { A: 1 } }] }, 'job.steps[0].env.A'],
    [{ ...job, env: { B: null } }, 'job.env.B'],
    [{ ...job, timeoutSeconds: -1 }, 'job.timeoutSeconds'],
    [{ ...job, container: {} }, 'job.container.image'],
  ])('refuses a job.assign it cannot run, and names the job so it can be refused by id', (bad, field) => {
    const res = parseOrchestratorMessage(JSON.stringify({ type: 'job.assign', job: bad }));
    expect(res).toMatchObject({ ok: false, jobId: 'j-1' });
    if (!res.ok) expect(res.problem.startsWith(field)).toBe(true);
  });
});
