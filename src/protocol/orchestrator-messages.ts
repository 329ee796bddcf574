/**
 * The agent's check of what the orchestrator sends. Hand-written and dependency-free, because the
 * agent must start in tens of milliseconds and so does not load a validation library.
 */
import type { OrchestratorMessage } from './messages.js';

export type CheckedMessage =
  | { ok: true; msg: OrchestratorMessage }
  /** `jobId` is set when a `job.assign` names a job, so the agent can report that job as failed. */
  | { ok: false; problem: string; jobId?: string };

/** A field that fails its check: the path names the field, as in "job.steps[2].run". */
class Invalid extends Error {}

type Obj = Record<string, unknown>;

function obj(v: unknown, path: string): Obj {
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw new Invalid(`${path}: must be an object`);
  return v as Obj;
}
function str(o: Obj, key: string, path: string, opts: { optional?: boolean; nonEmpty?: boolean } = {}) {
  const v = o[key];
  if (v === undefined && opts.optional) return;
  if (typeof v !== 'string') throw new Invalid(`${path}${key}: must be a string`);
  if (opts.nonEmpty && !v) throw new Invalid(`${path}${key}: must not be empty`);
}
function bool(o: Obj, key: string, path: string, optional = false) {
  const v = o[key];
  if (v === undefined && optional) return;
  if (typeof v !== 'boolean') throw new Invalid(`${path}${key}: must be true or false`);
}
function num(o: Obj, key: string, path: string, min: number, max: number, optional = false) {
  const v = o[key];
  if (v === undefined && optional) return;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max)
    throw new Invalid(`${path}${key}: must be a number from ${min} to ${max}`);
}
function strings(v: unknown, path: string) {
  if (!Array.isArray(v) || !v.every((s) => typeof s === 'string'))
    throw new Invalid(`${path}: must be a list of strings`);
}
function env(v: unknown, path: string, optional = false) {
  if (v === undefined && optional) return;
  const o = obj(v, path);
  for (const [k, val] of Object.entries(o))
    if (typeof val !== 'string') throw new Invalid(`${path}.${k}: must be a string`);
}

function checkJob(v: unknown) {
  const job = obj(v, 'job');
  str(job, 'id', 'job.', { nonEmpty: true });
  str(job, 'runId', 'job.');
  str(job, 'name', 'job.');
  env(job.env, 'job.env');
  num(job, 'timeoutSeconds', 'job.', 0, Number.MAX_SAFE_INTEGER, true);
  if (job.container !== undefined) str(obj(job.container, 'job.container'), 'image', 'job.container.');
  if (!Array.isArray(job.steps) || job.steps.length === 0)
    throw new Invalid('job.steps: must be a list with at least one step');
  job.steps.forEach((s: unknown, i: number) => {
    const p = `job.steps[${i}]`;
    const step = obj(s, p);
    str(step, 'name', `${p}.`);
    str(step, 'run', `${p}.`);
    env(step.env, `${p}.env`, true);
    num(step, 'timeoutSeconds', `${p}.`, 0, Number.MAX_SAFE_INTEGER, true);
  });
}

function check(m: Obj): void {
  switch (m.type) {
    case 'register.ack':
      str(m, 'agentId', '');
      strings(m.labels, 'labels');
      bool(m, 'scalerManaged', '');
      bool(m, 'pendingDispatch', '');
      bool(m, 'warmPool', '');
      // A zero or tiny interval would make the agent send heartbeats in a tight loop.
      num(m, 'heartbeatIntervalMs', '', 10, 3_600_000);
      str(m, 'resumeJobId', '', { optional: true });
      bool(m, 'acksResults', '', true);
      str(m, 'session', '', { optional: true });
      return;
    case 'claim.ack':
      str(m, 'agentId', '', { nonEmpty: true });
      str(m, 'token', '', { nonEmpty: true });
      strings(m.labels, 'labels');
      return;
    case 'register.rejected':
      num(m, 'code', '', 0, 65_535);
      str(m, 'reason', '');
      return;
    case 'job.assign':
      return checkJob(m.job);
    case 'job.cancel':
      str(m, 'jobId', '');
      str(m, 'reason', '');
      return;
    case 'job.finished.ack':
      str(m, 'jobId', '');
      return;
    case 'shutdown':
      str(m, 'reason', '');
      return;
    case 'heartbeat.ack':
      return;
    default:
      throw new Invalid(`type: unknown message type ${JSON.stringify(String(m.type)).slice(0, 60)}`);
  }
}

/** Parse one frame from the orchestrator and check its shape. Never throws. */
export function parseOrchestratorMessage(text: string): CheckedMessage {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { ok: false, problem: 'message is not JSON' };
  }
  try {
    const m = obj(raw, '(message)');
    check(m);
    return { ok: true, msg: m as unknown as OrchestratorMessage };
  } catch (err) {
    const m = typeof raw === 'object' && raw !== null ? (raw as Obj) : {};
    const job = m.type === 'job.assign' ? m.job : undefined;
    const jobId = typeof job === 'object' && job !== null ? (job as Obj).id : undefined;
    return {
      ok: false,
      problem: err instanceof Invalid ? err.message : 'message could not be checked',
      ...(typeof jobId === 'string' && jobId ? { jobId } : {}),
    };
  }
}
