/**
 * The event scaler's `webhook:` target against a real local HTTP server: the documented signature
 * verifies, delivery is retried until a 2xx, a receiver that keeps failing is given up on with the
 * reason shown, a scale-down goes out even when its scale-up was given up, and a reload's new
 * targets get the next scale-up.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFile } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import {
  ADMIN_BIN,
  eventually,
  runNode,
  startTestOrchestrator,
  writeConfig,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

const SECRET = 'test-webhook-secret';

interface Received {
  headers: Record<string, string>;
  raw: string;
  body: { eventId: string; event: string; payload: Record<string, unknown> };
}

/** A receiver; `answer` picks each response's status from what came in. */
async function receiver(answer: (r: Received, nth: number) => number) {
  const got: Received[] = [];
  const server: Server = createServer((req, res) => {
    let raw = '';
    req.on('data', (d) => (raw += String(d)));
    req.on('end', () => {
      const r: Received = {
        headers: req.headers as Record<string, string>,
        raw,
        body: JSON.parse(raw) as Received['body'],
      };
      got.push(r);
      res.statusCode = answer(r, got.length);
      res.end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  return { got, url, close: () => new Promise<void>((r) => server.close(() => r())) };
}

/** The check docs/events.md tells receivers to make. */
function verifies(r: Received, secret: string): boolean {
  const ts = r.headers['x-kici-timestamp'] ?? '';
  const want = `sha256=${createHmac('sha256', secret).update(`${ts}.${r.raw}`).digest('hex')}`;
  const have = r.headers['x-kici-signature'] ?? '';
  return have.length === want.length && timingSafeEqual(Buffer.from(have), Buffer.from(want));
}

function eventConfig(targets: string[], maxAgents = 2) {
  return {
    version: 1,
    scalers: [
      {
        name: 'hooked',
        type: 'event',
        maxAgents,
        labelSets: [{ labels: ['hooked'] }],
        provisioningTargets: targets,
      },
    ],
  };
}

let t: TestOrchestrator | undefined;
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await t?.stop();
  t = undefined;
  for (const c of closers.splice(0)) await c();
});

async function start(config: unknown, over: Record<string, unknown> = {}) {
  const path = await writeConfig(config);
  t = await startTestOrchestrator({
    scalerConfigPath: path,
    hostEnv: { ...process.env, KICI_SCALER_WEBHOOK_SECRET: SECRET },
    webhookRetry: { baseDelayMs: 20, maxDelayMs: 100, giveUpAfterMs: 600, attemptTimeoutMs: 2_000 },
    ...over,
  });
  return { t, path };
}

async function submit(runsOn: string) {
  const { body } = await t!.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
    jobs: { w: { runsOn: [runsOn], steps: [{ run: 'true' }] } },
  });
  return body.jobs[0]!.id;
}

describe('webhook provisioning target', () => {
  it('signs with the documented scheme and retries until a 2xx (after two 500s)', async () => {
    const rx = await receiver((_r, n) => (n <= 2 ? 500 : 204));
    closers.push(rx.close);
    await start(eventConfig([`webhook:${rx.url}`]));
    const jobId = await submit('hooked');
    await eventually(() => rx.got.length >= 3, 10_000, 'three attempts');
    await t!.orch.scaleEvents!.settle();
    expect(rx.got).toHaveLength(3);
    const ids = new Set(rx.got.map((r) => r.headers['x-kici-event-id']));
    expect(ids.size).toBe(1);
    for (const r of rx.got) {
      expect(verifies(r, SECRET)).toBe(true);
      expect(verifies(r, 'another-secret')).toBe(false);
      expect(r.headers['x-kici-event']).toBe('kici.scaler.scale-up');
      expect(r.body.eventId).toBe(r.headers['x-kici-event-id']);
      expect(r.body.payload).toMatchObject({ scalerName: 'hooked', jobId });
      expect(String(r.body.payload.claimCode)).toMatch(/^[0-9a-f]{64}$/);
      expect(Math.abs(Number(r.headers['x-kici-timestamp']) - Date.now() / 1000)).toBeLessThan(60);
    }
    // A tampered body does not verify.
    expect(verifies({ ...rx.got[0]!, raw: rx.got[0]!.raw.replace('hooked', 'hacked') }, SECRET)).toBe(false);
    const shown = await t!.api<{
      deliveries: { state: string; attempts: number; lastError: string | null }[];
    }>('GET', `/api/v1/events/${rx.got[0]!.body.eventId}`);
    expect(shown.body.deliveries).toEqual([
      expect.objectContaining({
        state: 'delivered',
        attempts: 3,
        lastError: 'HTTP 500 Internal Server Error',
      }),
    ]);
    await t!.api('POST', `/api/v1/jobs/${jobId}/cancel`);
  });

  it('gives up on a receiver that always fails, shows why, and still delivers the scale-down', async () => {
    // Scale-ups always fail; scale-downs are accepted.
    const rx = await receiver((r) => (r.body.event === 'kici.scaler.scale-up' ? 503 : 200));
    closers.push(rx.close);
    await start(eventConfig([`webhook:${rx.url}`]), {
      spawnTimeoutMs: 1_200,
      reapIntervalMs: 200,
      reapWindows: { flapGraceMs: 0 },
    });
    const jobId = await submit('hooked');
    const upId = await eventually(() => rx.got[0]?.body.eventId, 10_000, 'the scale-up');
    await eventually(
      async () =>
        (await t!.api<{ deliveries: { state: string }[] }>('GET', `/api/v1/events/${upId}`)).body
          .deliveries[0]?.state === 'given-up',
      10_000,
      'the scale-up given up',
    );
    const shown = await t!.api<{ deliveries: { lastError: string; attempts: number }[] }>(
      'GET',
      `/api/v1/events/${upId}`,
    );
    expect(shown.body.deliveries[0]!.lastError).toMatch(/^gave up after \d+ attempts: HTTP 503/);
    expect(shown.body.deliveries[0]!.attempts).toBeGreaterThan(1);
    const status = await t!.api<{
      scalers: { name: string; deliveryGivenUp: { eventId: string; lastError: string } | null }[];
    }>('GET', '/api/v1/scaler/status');
    expect(status.body.scalers[0]!.deliveryGivenUp).toMatchObject({
      eventId: upId,
      lastError: expect.stringMatching(/HTTP 503/),
    });
    const diag = await t!.api<{
      healthy: boolean;
      scalers: { findings: { problem: string; fix: string }[] }[];
    }>('GET', '/api/v1/scaler/diagnose');
    expect(diag.body.healthy).toBe(false);
    expect(diag.body.scalers[0]!.findings.map((f) => f.problem).join('\n')).toMatch(
      /kici.scaler.scale-up .* was given up: gave up after/,
    );
    // The instance never registers: the reaper's scale-down reaches the receiver all the same.
    const down = await eventually(
      () => rx.got.find((r) => r.body.event === 'kici.scaler.scale-down'),
      15_000,
      'the scale-down',
    );
    expect(down.body.payload).toMatchObject({
      reason: 'spawn-timeout',
      agentId: rx.got[0]!.body.payload.agentId,
    });
    expect(verifies(down, SECRET)).toBe(true);
    // The operator's view: kici-admin event list / show, as a process.
    const env = { KICI_SERVER_URL: t!.orch.url, KICI_ADMIN_TOKEN: t!.orch.adminToken };
    const list = await runNode([ADMIN_BIN, 'event', 'list', '--name', 'kici.scaler.scale-up'], env).exited;
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/EVENT\s+NAME\s+SCALER\s+AGENT/);
    expect(list.stdout).toContain(upId);
    expect(list.stdout).toMatch(/scale-up .*given-up .*gave up after \d+ attempts: HTTP 503/);
    const show = await runNode([ADMIN_BIN, 'event', 'show', upId], env).exited;
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toContain('event:   kici.scaler.scale-up');
    expect(show.stdout).toMatch(/webhook:http:\/\/127\.0\.0\.1:\d+\/hook\s+given-up/);
    expect(show.stdout).not.toMatch(/[0-9a-f]{64}/);
    const statusCli = await runNode([ADMIN_BIN, 'scaler', 'status'], env).exited;
    expect(statusCli.code, statusCli.stderr).toBe(0);
    expect(statusCli.stdout).toMatch(
      new RegExp(
        `hooked: kici\\.scaler\\.scale-up for \\S+ to webhook:\\S+ was given up: gave up after \\d+ attempts: HTTP 503.*event show [0-9a-f-]{36}\\)`,
      ),
    );
    const missing = await runNode([ADMIN_BIN, 'event', 'show', 'no-such-event'], env).exited;
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/event no-such-event does not exist/);
    const metrics = await (
      await fetch(`${t!.orch.url}/metrics`, { headers: { authorization: `Bearer ${t!.orch.adminToken}` } })
    ).text();
    expect(metrics).toMatch(
      /kici_orch_scaler_external_provisioning_delivery_given_up_total\{scaler="hooked"\} [1-9]/,
    );
    await t!.api('POST', `/api/v1/jobs/${jobId}/cancel`);
  });

  it('a reload that changes provisioningTargets sends the next scale-up to the new target', async () => {
    const a = await receiver(() => 200);
    const b = await receiver(() => 200);
    closers.push(a.close, b.close);
    const { path } = await start(eventConfig([`webhook:${a.url}`], 3));
    await submit('hooked');
    await eventually(() => a.got.length === 1, 10_000, 'scale-up at the first target');
    await writeFile(path, JSON.stringify(eventConfig([`webhook:${b.url}`], 3)));
    const reload = await t!.api<{ result: string }>('POST', '/api/v1/scaler/reload');
    expect(reload.body.result).toBe('applied');
    const second = await submit('hooked');
    await eventually(() => b.got.length === 1, 10_000, 'scale-up at the new target');
    expect(b.got[0]!.body.payload.jobId).toBe(second);
    expect(a.got).toHaveLength(1);
    // Both jobs still wait for their instances. Stopping the orchestrator emits nothing: the two
    // provisions belong to the cluster. (A cancel would withdraw them at once, with a scale-down.)
    expect(t!.orch.scaler!.backendList()[0]!.getActiveCount()).toBe(2);
    await t!.stop();
    await new Promise((r) => setTimeout(r, 300));
    expect([...a.got, ...b.got].map((r) => r.body.event)).toEqual([
      'kici.scaler.scale-up',
      'kici.scaler.scale-up',
    ]);
  });

  it('refuses to start with a webhook target and no signing secret, naming the variable', async () => {
    const path = await writeConfig(eventConfig(['webhook:http://127.0.0.1:9/hook']));
    const env = { ...process.env };
    delete env.KICI_SCALER_WEBHOOK_SECRET;
    await expect(startTestOrchestrator({ scalerConfigPath: path, hostEnv: env })).rejects.toThrow(
      /KICI_SCALER_WEBHOOK_SECRET is not set/,
    );
  });
});
