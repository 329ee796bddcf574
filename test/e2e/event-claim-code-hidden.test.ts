/**
 * A claim code lives in the clear only on its way to the provisioning job: after an event round
 * trip it is in no stored job spec or environment, no table, no API answer, no orchestrator log
 * line, no job log (even one whose template prints the payload) and no file under /tmp. Only its
 * hash is kept.
 */
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import type { Kysely } from 'kysely';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { databaseText } from '../helpers/db-text.js';
import { makeEventCloud, type EventCloud } from '../helpers/event-instance.js';
import { eventually, startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';
import { apiAnswersText, filesHolding } from '../helpers/secret-scan.js';

let t: TestOrchestrator | undefined;
let cloud: EventCloud | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
  if (cloud) await rm(cloud.dir, { recursive: true, force: true });
  cloud = undefined;
});

interface EventView {
  eventId: string;
  event: string;
  state: string;
  jobId: string | null;
}

describe('claim codes after an event round trip', () => {
  it('appear in no job spec, job env, table, API answer, log or file under /tmp', async () => {
    const startedAt = Date.now() - 1000;
    const logLines: string[] = [];
    const logger = pino(
      { level: 'debug' },
      new Writable({
        write(chunk, _enc, cb) {
          logLines.push(String(chunk));
          cb();
        },
      }),
    );
    cloud = await makeEventCloud({ mode: 'ws', printPayload: true });
    t = await startTestOrchestrator({ scalerConfigPath: cloud.configPath, logger });
    const { body } = await t.api<{ runId: string; jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { work: { runsOn: ['cloud'], steps: [{ run: 'echo ran' }] } },
    });
    const done = await t.waitForJob(body.jobs[0]!.id, undefined, 90_000);
    expect(done.state, String(done.reason)).toBe('succeeded');

    // Both provisioning jobs (up and down) have ended.
    const events = await eventually(
      async () => {
        const list = (await t!.api<{ events: EventView[] }>('GET', '/api/v1/events')).body.events;
        return list.length === 2 && list.every((e) => e.jobId) && list;
      },
      60_000,
      'the scale-up and scale-down events delivered',
    );
    const provisioning = events.map((e) => e.jobId!);
    for (const id of provisioning)
      expect((await t.waitForJob(id, undefined, 60_000)).state).toBe('succeeded');
    await t.orch.dispatcher.logs.flush();

    const codes = (await readFile(join(cloud.stateDir, 'claim-codes.log'), 'utf8'))
      .split('\n')
      .filter(Boolean);
    expect(codes).toHaveLength(1);
    const code = codes[0]!;
    expect(code).toMatch(/^[0-9a-f]{64}$/);

    const upJob = events.find((e) => e.event === 'kici.scaler.scale-up')!.jobId!;
    const places = {
      tables: await databaseText(t.orch.store.db as unknown as Kysely<unknown>),
      api: await apiAnswersText(t, {
        jobs: [...provisioning, body.jobs[0]!.id],
        runs: [body.runId],
        events: events.map((e) => e.eventId),
      }),
      orchestratorLog: logLines.join(''),
      tmpFiles: (await filesHolding('/tmp', code, startedAt, [cloud.dir])).join('\n'),
    };
    for (const [where, text] of Object.entries(places)) expect(text.includes(code), where).toBe(false);
    // The stored spec names the sealed variable and holds no payload.
    const row = await t.orch.store.jobs.get(upJob);
    const spec = row!.spec as { env?: Record<string, string>; sealedEnv?: string[] };
    expect(spec.sealedEnv).toEqual(['KICI_EVENT_PAYLOAD']);
    expect(spec.env?.KICI_EVENT_PAYLOAD).toBeUndefined();

    // The template printed the payload: its log shows the mask in its place.
    const printed = await t.api<{ lines: { line: string }[] }>('GET', `/api/v1/jobs/${upJob}/logs`);
    expect(printed.body.lines.map((l) => l.line).join('\n')).toMatch(/\*\*\*/);
    // The tables did hold the run (the scan looked at real rows), and the payload files are gone.
    expect(places.tables).toContain(upJob);
    const left = (await readdir('/tmp')).filter((f) =>
      events.some((e) => f === `kici-event-${e.eventId}.json`),
    );
    expect(left).toEqual([]);
  });
});
