/**
 * Every agent message is checked before it touches state, and a job result is dropped from memory
 * only once the row that replaces it is written. Driven by a hand-made agent (raw WebSocket frames)
 * holding a real static token.
 */
import { Writable } from 'node:stream';
import { sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bystanderJob, expectHealthy } from '../../helpers/adversarial.js';
import { uncaughtErrors, watchUncaught } from '../../helpers/uncaught.js';
import {
  bareMetalConfig,
  eventually,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';
import {
  nextMessage,
  rawConnect,
  rawRegister,
  textFrame,
  within,
  type RawConn,
} from '../../helpers/raw-ws.js';

let t: TestOrchestrator;
let bystander: Awaited<ReturnType<typeof bystanderJob>>;
let token: string;
let conn: RawConn | undefined;
const logs: { level: number; msg: string; [k: string]: unknown }[] = [];

beforeAll(async () => {
  watchUncaught();
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of String(chunk).split('\n')) if (line) logs.push(JSON.parse(line));
      cb();
    },
  });
  t = await startTestOrchestrator({ config: bareMetalConfig(), logger: pino({ level: 'info' }, sink) });
  bystander = await bystanderJob(t, ['linux', 'small']);
  const minted = await t.api<{ token: string }>('POST', '/api/v1/agents/tokens', {
    labels: ['pv'],
    agentId: 'pv-agent',
  });
  expect(minted.status).toBe(201);
  token = minted.body.token;
});

afterAll(async () => {
  conn?.destroy();
  await t?.stop();
});

/** Register the hand-made agent, give it a job, and report the job as started. */
async function runningJob(): Promise<string> {
  conn?.destroy();
  conn = await rawRegister(t.orch.url, 'pv-agent', token, ['pv']);
  const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
    jobs: { victim: { runsOn: ['pv'], steps: [{ run: 'true' }] } },
  });
  expect(run.status).toBe(201);
  const jobId = run.body.jobs[0]!.id;
  await nextMessage(conn, (m) => m.type === 'job.assign' && (m.job as { id: string }).id === jobId);
  conn.send(textFrame({ type: 'job.started', jobId }));
  await t.waitForJob(jobId, ['running'], 10_000);
  return jobId;
}

const acked = (jobId: string) =>
  conn!.messages().some((m) => m.type === 'job.finished.ack' && m.jobId === jobId);

async function expectUnharmed(): Promise<void> {
  expect(uncaughtErrors()).toEqual([]);
  await expectHealthy(t);
  await bystander.check();
}

describe('agent messages are validated', () => {
  it('job.finished with an exit code beyond int4 is refused and the job stays cancellable', async () => {
    const jobId = await runningJob();
    conn!.send(textFrame({ type: 'job.finished', jobId, result: 'failed', exitCode: 99_999_999_999 }));
    // Whatever the server made of it, it has logged it.
    const logged = await eventually(
      () =>
        logs.find(
          (l) => l.msg === 'ignored an invalid agent message' || l.msg === 'agent message handling failed',
        ),
      5_000,
      'the job.finished to be handled',
    );
    expect(acked(jobId)).toBe(false);
    expect((await t.api<{ state: string }>('GET', `/api/v1/jobs/${jobId}`)).body.state).toBe('running');
    const cancel = await t.api('POST', `/api/v1/jobs/${jobId}/cancel`);
    expect(cancel.status).toBe(200);
    // Refused by the schema, not failed in the store.
    expect(logged).toMatchObject({
      msg: 'ignored an invalid agent message',
      agentId: 'pv-agent',
      type: 'job.finished',
    });
    expect(String(logged.problem)).toContain('exitCode');
    await nextMessage(conn!, (m) => m.type === 'job.cancel' && m.jobId === jobId);
    expect((await t.waitForJob(jobId)).state).toBe('cancelled');
    await expectUnharmed();
  });

  it('out-of-range numbers and wrong types in other messages name the field and change nothing', async () => {
    const jobId = await runningJob();
    const bad: [Record<string, unknown>, string][] = [
      [{ type: 'step.started', jobId, idx: 99_999_999_999, name: 's' }, 'idx'],
      [{ type: 'step.started', jobId, idx: -1, name: 's' }, 'idx'],
      [
        { type: 'step.finished', jobId, idx: 0, exitCode: 2 ** 31, timedOut: false, durationMs: 1 },
        'exitCode',
      ],
      [{ type: 'step.finished', jobId, idx: 0, exitCode: 1.5, timedOut: false, durationMs: 1 }, 'exitCode'],
      [{ type: 'log', jobId, idx: 0, stream: 'stdin', lines: ['x'] }, 'stream'],
      [{ type: 'log', jobId, idx: 0, stream: 'stdout', lines: [1] }, 'lines'],
      [{ type: 'job.finished', jobId, result: 'exploded', exitCode: 0 }, 'result'],
      [{ type: 'job.started', jobId: 'x'.repeat(10_000) }, 'jobId'],
      [{ type: 'job.started', jobId: 'j-\u0000' }, 'jobId'],
    ];
    for (const [msg, field] of bad) {
      const seen = logs.length;
      conn!.send(textFrame(msg));
      await eventually(
        () =>
          logs
            .slice(seen)
            .find((l) => l.msg === 'ignored an invalid agent message' && String(l.problem).startsWith(field)),
        5_000,
        `the invalid ${String(msg.type)} (${field}) to be logged`,
      );
    }
    expect((await t.api<{ state: string }>('GET', `/api/v1/jobs/${jobId}`)).body.state).toBe('running');
    // The connection is still usable: a valid result settles the job.
    conn!.send(textFrame({ type: 'job.finished', jobId, result: 'succeeded', exitCode: 0 }));
    await nextMessage(conn!, (m) => m.type === 'job.finished.ack' && m.jobId === jobId);
    expect((await t.waitForJob(jobId)).state).toBe('succeeded');
    await expectUnharmed();
  });

  it('a NUL byte or a lone surrogate in the result message is stored as U+FFFD, not refused by the store', async () => {
    const jobId = await runningJob();
    conn!.send(
      textFrame({ type: 'job.finished', jobId, result: 'failed', exitCode: 1, message: 'a\u0000b\ud800c' }),
    );
    await nextMessage(conn!, (m) => m.type === 'job.finished.ack' && m.jobId === jobId);
    const job = await t.waitForJob(jobId);
    expect(job).toMatchObject({ state: 'failed', exitCode: 1, reason: 'a\ufffdb\ufffdc' });
    await expectUnharmed();
  });
});

describe('a result the store refuses stays in memory', () => {
  it('is not acknowledged, keeps the job open, and is stored when the agent sends it again', async () => {
    const jobId = await runningJob();
    // A real store failure, made by the database itself: refuse any job update to exit code 77.
    const db = t.orch.store.db;
    await sql`CREATE FUNCTION pv_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.exit_code = 77 THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$`.execute(
      db,
    );
    await sql`CREATE TRIGGER pv_refuse BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION pv_refuse()`.execute(
      db,
    );
    try {
      const finished = textFrame({ type: 'job.finished', jobId, result: 'failed', exitCode: 77 });
      conn!.send(finished);
      const logged = await eventually(
        () =>
          logs.find(
            (l) => l.msg === 'could not store the job result; the job stays open' && l.jobId === jobId,
          ),
        5_000,
        'the failed write to be logged',
      );
      expect(logged).toMatchObject({ agentId: 'pv-agent', state: 'failed', exitCode: 77 });
      await new Promise((r) => setTimeout(r, 300));
      expect(acked(jobId)).toBe(false);
      expect((await t.api<{ state: string }>('GET', `/api/v1/jobs/${jobId}`)).body.state).toBe('running');
      expect(t.orch.dispatcher.active.has(jobId)).toBe(true);

      await sql`DROP TRIGGER pv_refuse ON jobs`.execute(db);
      // What a real agent does after a reconnect: send the unacknowledged result again.
      conn!.send(textFrame({ type: 'job.finished', jobId, result: 'failed', exitCode: 77 }));
      await nextMessage(conn!, (m) => m.type === 'job.finished.ack' && m.jobId === jobId);
      expect(await t.waitForJob(jobId)).toMatchObject({ state: 'failed', exitCode: 77 });
    } finally {
      await sql`DROP TRIGGER IF EXISTS pv_refuse ON jobs`.execute(db);
      await sql`DROP FUNCTION IF EXISTS pv_refuse()`.execute(db);
    }
    await expectUnharmed();
  });
});

describe('a registration the store cannot check', () => {
  it('closes with 1011 instead of leaving an unregistered socket open', async () => {
    const db = t.orch.store.db;
    // A real store failure: the token lookup finds no table.
    await sql`ALTER TABLE agent_tokens RENAME TO agent_tokens_away`.execute(db);
    try {
      const c = await rawConnect(t.orch.url);
      c.send(textFrame({ type: 'register', protocol: 1, agentId: 'pv-agent', token, labels: ['pv'] }));
      const closed = await within(c.closed, 5_000, 'the connection to be closed');
      c.destroy();
      expect(closed.code).toBe(1011);
    } finally {
      await sql`ALTER TABLE agent_tokens_away RENAME TO agent_tokens`.execute(db);
    }
    expect(logs.some((l) => l.msg === 'agent message handling failed')).toBe(true);
    await expectUnharmed();
  });
});
