/**
 * The event scaler end to end on the embedded defaults: its `job:` target is a provisioning job of
 * ours, run by a bare-metal agent, that boots a detached kici-agent "instance" from the payload;
 * the bound job runs there; the scale-down runs the template again and stops the instance.
 */
import { readFile, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { WebSocket } from 'ws';
import { StoreClaimStore } from '../../src/scaler/claim-store.js';
import { systemClock } from '../../src/util/clock.js';
import { afterEach, describe, expect, it } from 'vitest';
import { makeEventCloud, type EventCloud } from '../helpers/event-instance.js';
import {
  eventually,
  scalerIdle,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { pidsWithEnv } from '../helpers/processes.js';

let t: TestOrchestrator | undefined;
let cloud: EventCloud | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
  if (cloud) await rm(cloud.dir, { recursive: true, force: true });
  cloud = undefined;
});

interface Logged {
  name: string;
  agentId: string;
  reason: string | null;
  keys: string[];
}

async function events(c: EventCloud): Promise<Logged[]> {
  const text = await readFile(join(c.stateDir, 'events.log'), 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Logged);
}

/** Every log line the orchestrator writes, at debug level. */
function capturingLogger() {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      lines.push(String(chunk));
      cb();
    },
  });
  return { logger: pino({ level: 'debug' }, stream), lines };
}

interface EventView {
  eventId: string;
  event: string;
  agentId: string;
  reason: string | null;
  state: string;
  jobId: string | null;
}

describe('event scaler with a job: target (real server, PGlite, agent processes)', () => {
  it('provisions an instance through our own queue, runs the bound job there, and tears it down with job-complete', async () => {
    cloud = await makeEventCloud({ mode: 'ws' });
    t = await startTestOrchestrator({ scalerConfigPath: cloud.configPath });
    const { body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { work: { runsOn: ['cloud'], steps: [{ run: 'echo ran-on-$KICI_JOB_NAME' }] } },
    });
    const done = await t.waitForJob(body.jobs[0]!.id, undefined, 90_000);
    expect(done.state, String(done.reason)).toBe('succeeded');
    expect(done.agentId).toMatch(/^scaler-event-[0-9a-f]{8}$/);
    const agentId = done.agentId!;

    // The scale-down ran the template again, with reason job-complete, and it stopped the instance.
    await eventually(
      async () => (await events(cloud!)).some((e) => e.name === 'kici.scaler.scale-down'),
      60_000,
      'the scale-down provisioning job',
    );
    const seen = await events(cloud);
    expect(seen.map((e) => [e.name, e.agentId, e.reason])).toEqual([
      ['kici.scaler.scale-up', agentId, null],
      ['kici.scaler.scale-down', agentId, 'job-complete'],
    ]);
    expect(seen[0]!.keys).toEqual([
      'agentId',
      'claimCode',
      'jobId',
      'labels',
      'mandatoryLabels',
      'orchestratorUrl',
      'requestId',
      'resources',
      'scalerName',
    ]);
    expect(seen[1]!.keys).toEqual(['agentId', 'reason', 'requestId', 'scalerName']);

    // Both provisioning jobs ran on the bare-metal scaler, never on the event scaler.
    const list = await t.api<{ events: EventView[] }>('GET', '/api/v1/events');
    expect(list.body.events.map((e) => e.state)).toEqual(['delivered', 'delivered']);
    for (const e of list.body.events) {
      const job = await t.waitForJob(e.jobId!, undefined, 60_000);
      expect(job.state).toBe('succeeded');
      expect(job.agentId).toMatch(/^scaler-bare-metal-/);
    }
    const shown = await t.api<{ payload: Record<string, unknown>; deliveries: EventView[] }>(
      'GET',
      `/api/v1/events/${list.body.events.find((e) => e.event === 'kici.scaler.scale-up')!.eventId}`,
    );
    expect(shown.body.payload.agentId).toBe(agentId);
    expect(String(shown.body.payload.claimCode)).toMatch(/^[0-9a-f]{12}…$/);

    // Nothing is left running: not the instance, not a provisioning agent.
    const pidFiles = (await readdir(cloud.stateDir)).filter((f) => f.endsWith('.pid'));
    expect(pidFiles).toEqual([]);
    await eventually(
      async () => (await pidsWithEnv(`KICI_AGENT_ID=${agentId}`)).length === 0,
      10_000,
      'the instance agent gone from /proc',
    );
    await eventually(() => scalerIdle(t!.orch.scaler!), 20_000, 'all scaler agents torn down');
    await eventually(
      async () =>
        (await t!.orch.store.db.selectFrom('scaler_spawning_agents').selectAll().execute()).length === 0,
      10_000,
      'spawn records deleted',
    );
    expect(await t.orch.store.db.selectFrom('scaler_pending_claims').selectAll().execute()).toEqual([]);
    const metrics = await (
      await fetch(`${t.orch.url}/metrics`, { headers: { authorization: `Bearer ${t.orch.adminToken}` } })
    ).text();
    expect(metrics).toMatch(/kici_orch_scaler_scale_up_emitted_total\{scaler="cloud"\} 1/);
    expect(metrics).toMatch(
      /kici_orch_scaler_scale_down_emitted_total\{scaler="cloud",reason="job-complete"\} 1/,
    );
    expect(metrics).toMatch(/kici_orch_scaler_external_provisioning_active\{scaler="cloud"\} 0/);
  });

  it('a provisioning job never runs on the event scaler it provisions for (no recursion)', async () => {
    // A template that asks for the event scaler's own labels: nothing else serves them.
    cloud = await makeEventCloud({ templateRunsOn: ['cloud'] });
    t = await startTestOrchestrator({ scalerConfigPath: cloud.configPath });
    const { body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { work: { runsOn: ['cloud'], steps: [{ run: 'true' }] } },
    });
    const up = await eventually(
      async () =>
        (await t!.api<{ events: EventView[] }>('GET', '/api/v1/events')).body.events.find((e) => e.jobId),
      20_000,
      'the scale-up with its provisioning job',
    );
    const provisioning = await t.waitForJob(up.jobId!, undefined, 20_000);
    expect(provisioning.state).toBe('no-backend');
    await new Promise((r) => setTimeout(r, 500));
    // Exactly one provision: the provisioning job did not trigger one of its own.
    const all = (await t.api<{ events: EventView[] }>('GET', '/api/v1/events')).body.events;
    expect(all.filter((e) => e.event === 'kici.scaler.scale-up')).toHaveLength(1);
    expect(t.orch.scaler!.entries().filter((e) => e.scalerName === 'cloud')).toHaveLength(1);
    await t.api('POST', `/api/v1/jobs/${body.jobs[0]!.id}/cancel`);
  });

  it('the token a claim yields appears in no log line, payload or API response of the run', async () => {
    cloud = await makeEventCloud({ mode: 'http' });
    const { logger, lines } = capturingLogger();
    t = await startTestOrchestrator({ scalerConfigPath: cloud.configPath, logger });
    const { body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { work: { runsOn: ['cloud'], steps: [{ run: 'echo hello' }] } },
    });
    const done = await t.waitForJob(body.jobs[0]!.id, undefined, 90_000);
    expect(done.state, String(done.reason)).toBe('succeeded');
    const agentId = done.agentId!;
    const token = (await readFile(join(cloud.stateDir, `${agentId}.token`), 'utf8')).trim();
    expect(token).toMatch(/^kici_/);
    // And one redeemed over the WebSocket claim step: its token travels only in claim.ack.
    const issuer = new StoreClaimStore(t.orch.store, systemClock, { scalerName: 'cloud' });
    const code = await issuer.register({
      agentId: 'scaler-event-feedf00d',
      labels: ['cloud'],
      orchestratorUrl: t.orch.wsUrl,
    });
    const wsToken = await new Promise<string>((resolve, reject) => {
      const ws = new WebSocket(t!.orch.wsUrl);
      ws.on('open', () => ws.send(JSON.stringify({ type: 'claim', protocol: 1, code })));
      ws.on('message', (d) => {
        const m = JSON.parse(String(d)) as { type: string; token?: string };
        if (m.type === 'claim.ack' && m.token) resolve(m.token);
        ws.close();
      });
      ws.on('error', reject);
    });
    expect(wsToken).toMatch(/^kici_/);
    await eventually(
      async () => (await events(cloud!)).some((e) => e.name === 'kici.scaler.scale-down'),
      60_000,
      'the scale-down',
    );
    const list = await t.api<{ events: EventView[] }>('GET', '/api/v1/events');
    const responses: unknown[] = [list.body];
    for (const e of list.body.events) {
      responses.push((await t.api('GET', `/api/v1/events/${e.eventId}`)).body);
      await t.waitForJob(e.jobId!, undefined, 60_000);
      responses.push((await t.api('GET', `/api/v1/jobs/${e.jobId}`)).body);
      responses.push((await t.api('GET', `/api/v1/jobs/${e.jobId}/logs`)).body);
    }
    for (const path of [
      '/api/v1/jobs',
      `/api/v1/jobs/${done.id}`,
      `/api/v1/jobs/${done.id}/logs`,
      '/api/v1/scaler/status',
      '/api/v1/scaler/diagnose',
      '/api/v1/agents',
      '/api/v1/agents/tokens?all=true',
    ])
      responses.push((await t.api('GET', path)).body);
    const deliveries = await t.orch.store.db.selectFrom('scaler_event_deliveries').selectAll().execute();
    const jobs = await t.orch.store.db.selectFrom('jobs').select(['spec']).execute();
    const instanceLog = await readFile(join(cloud.stateDir, `${agentId}.log`), 'utf8');
    const haystacks = {
      logs: lines.join(''),
      payloads: JSON.stringify(deliveries),
      jobSpecs: JSON.stringify(jobs),
      api: JSON.stringify(responses),
      instanceLog,
    };
    expect(haystacks.logs.length).toBeGreaterThan(1000);
    // The instance did use the token: it registered under the claimed id.
    expect(haystacks.logs).toContain(agentId);
    for (const [where, text] of Object.entries(haystacks)) {
      expect(text.includes(token), where).toBe(false);
      expect(text.includes(wsToken), where).toBe(false);
    }
    await eventually(
      async () => (await pidsWithEnv(`KICI_AGENT_ID=${agentId}`)).length === 0,
      10_000,
      'the instance agent gone',
    );
  });

  it('a provision whose instance never connects is reaped with spawn-timeout and its job goes back to the queue', async () => {
    cloud = await makeEventCloud({ targets: ['job:provision.yaml'] });
    t = await startTestOrchestrator({
      scalerConfigPath: cloud.configPath,
      spawnTimeoutMs: 1_500,
      reapIntervalMs: 200,
      reapWindows: { flapGraceMs: 0 },
    });
    // The template boots nothing when the "cloud" is broken: remove its script.
    await rm(join(cloud.dir, 'instance.mjs'));
    const { body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { work: { runsOn: ['cloud'], steps: [{ run: 'true' }] } },
    });
    const jobId = body.jobs[0]!.id;
    const first = await eventually(
      async () =>
        (await t!.api<{ events: EventView[] }>('GET', '/api/v1/events')).body.events.find(
          (e) => e.event === 'kici.scaler.scale-down',
        ),
      30_000,
      'a scale-down',
    );
    expect(first.reason).toBe('spawn-timeout');
    // The owner's own stale prune or the leader's reaper (which waits out its absence clock) sends
    // it, whichever comes first; only one does.
    const downs = (await t.api<{ events: EventView[] }>('GET', '/api/v1/events')).body.events.filter(
      (e) => e.event === 'kici.scaler.scale-down' && e.agentId === first.agentId,
    );
    expect(downs).toHaveLength(1);
    const job = await t.api<{ state: string; waiting: string | null }>('GET', `/api/v1/jobs/${jobId}`);
    expect(job.body.state).toBe('queued');
    // Requeued: the job is offered again and a new provision is made for it.
    await eventually(
      async () =>
        new Set(
          (await t!.api<{ events: EventView[] }>('GET', '/api/v1/events')).body.events
            .filter((e) => e.event === 'kici.scaler.scale-up')
            .map((e) => e.agentId),
        ).size >= 2,
      30_000,
      'a second provision for the requeued job',
    );
    const metrics = await (
      await fetch(`${t.orch.url}/metrics`, { headers: { authorization: `Bearer ${t.orch.adminToken}` } })
    ).text();
    expect(metrics).toMatch(/kici_orch_scaler_external_provision_timeout_total\{scaler="cloud"\} [1-9]/);
    await t.api('POST', `/api/v1/jobs/${jobId}/cancel`);
  });

  it('a never-connecting provision whose job was cancelled is torn down with job-complete, not counted as a timeout', async () => {
    cloud = await makeEventCloud({});
    t = await startTestOrchestrator({
      scalerConfigPath: cloud.configPath,
      spawnTimeoutMs: 1_500,
      reapIntervalMs: 200,
      reapWindows: { flapGraceMs: 0 },
    });
    await rm(join(cloud.dir, 'instance.mjs'));
    const { body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { work: { runsOn: ['cloud'], steps: [{ run: 'true' }] } },
    });
    const jobId = body.jobs[0]!.id;
    await eventually(
      async () => (await t!.api<{ events: EventView[] }>('GET', '/api/v1/events')).body.events.length > 0,
      20_000,
      'the scale-up',
    );
    await t.api('POST', `/api/v1/jobs/${jobId}/cancel`);
    const down = await eventually(
      async () =>
        (await t!.api<{ events: EventView[] }>('GET', '/api/v1/events')).body.events.find(
          (e) => e.event === 'kici.scaler.scale-down',
        ),
      30_000,
      'the scale-down',
    );
    expect(down.reason).toBe('job-complete');
    // The reaper also purges claim codes that expired more than the retention (1 h) ago.
    const claim = (hash: string, expiresAt: Date) => ({
      claim_hash: hash,
      claim_prefix: hash.slice(0, 12),
      agent_id: 'scaler-event-00001111',
      scaler_name: 'cloud',
      labels: '["cloud"]',
      agent_token_ttl_ms: 600_000,
      orchestrator_url: t!.orch.wsUrl,
      expires_at: expiresAt,
    });
    await t.orch.store.db
      .insertInto('scaler_pending_claims')
      .values([
        claim('a'.repeat(64), new Date(Date.now() - 2 * 3_600_000)),
        claim('b'.repeat(64), new Date(Date.now() - 600_000)),
      ])
      .execute();
    await eventually(
      async () =>
        (await t!.orch.store.db.selectFrom('scaler_pending_claims').select('claim_hash').execute())
          .map((r) => r.claim_hash)
          .join() === 'b'.repeat(64),
      10_000,
      'the long-expired claim purged, the recent one kept',
    );
    const metrics = await (
      await fetch(`${t.orch.url}/metrics`, { headers: { authorization: `Bearer ${t.orch.adminToken}` } })
    ).text();
    expect(metrics).not.toMatch(/kici_orch_scaler_external_provision_timeout_total\{scaler="cloud"\} [1-9]/);
    await eventually(
      () => t!.orch.scaler!.entries().every((e) => e.scalerName !== 'cloud'),
      10_000,
      'provision gone',
    );
  });
});
