/**
 * Engine outage: the scaler talks to the engine through a socket the test can shut. While it is
 * shut, spawns fail as engine-unavailable and back off; once it is back the waiting jobs run; and
 * nothing is left behind: no container, firewall rule or live token of a failed spawn.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import {
  containerScaler,
  ENGINE,
  ENGINE_SOCKET,
  RecordingIsolation,
  removeScalerContainers,
  scalerContainers,
} from '../../helpers/engine.js';
import { submit } from '../../helpers/jobs.js';
import { eventually, startTestOrchestrator, type TestOrchestrator } from '../../helpers/orchestrator.js';
import { SocketProxy } from '../../helpers/socket-proxy.js';

const NAME = `outage-${ENGINE}`;
let t: TestOrchestrator | undefined;
let proxy: SocketProxy | undefined;
let dir: string | undefined;
afterEach(async () => {
  await t?.stop();
  await proxy?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
  t = proxy = dir = undefined;
  await removeScalerContainers(NAME);
});

describe(`engine outage on ${ENGINE}`, () => {
  it('fails spawns as engine-unavailable with backoff, then runs the waiting jobs and leaks nothing', async () => {
    dir = await mkdtemp(join(tmpdir(), 'kici-outage-'));
    // The path names the runtime, as an operator's socketPath would.
    proxy = new SocketProxy(join(dir, `${ENGINE}.sock`), ENGINE_SOCKET);
    await proxy.start();
    const logs: { msg: string; kind?: string; agentId?: string; retryInMs?: number }[] = [];
    const logger = pino({ level: 'warn' }, { write: (s: string) => void logs.push(JSON.parse(s)) });
    const isolation = new RecordingIsolation();
    t = await startTestOrchestrator({
      host: '0.0.0.0',
      isolation,
      logger,
      // Short deferrals: the jobs wait out the backoff once the engine is back (30 s by default).
      provisionBackoff: { baseMs: 2_000, maxMs: 4_000 },
      config: { version: 1, scalers: [containerScaler(NAME, { socketPath: proxy.path })] },
    });
    await proxy.stop();
    const jobs = await submit(t, {
      a: { runsOn: [NAME], steps: [{ run: 'echo a-ran' }] },
      b: { runsOn: [NAME], steps: [{ run: 'echo b-ran' }] },
    });
    const failures = () => logs.filter((l) => l.msg.startsWith('Scaler spawn failed'));
    await eventually(
      () => failures().some((l) => l.retryInMs !== undefined && l.retryInMs > 0),
      60_000,
      'backoff armed',
    );
    expect(failures().every((l) => l.kind === 'engine-unavailable')).toBe(true);
    for (const j of jobs) expect((await t.waitForJob(j, ['queued'], 1_000)).state).toBe('queued');
    const failedIds = new Set(failures().map((l) => l.agentId!));

    await proxy.start();
    for (const j of jobs) expect((await t.waitForJob(j, undefined, 180_000)).state).toBe('succeeded');
    await eventually(async () => (await scalerContainers(NAME)).length === 0, 30_000, 'no container left');
    expect(isolation.ruled.size).toBe(0);
    const tokens = await t.orch.store.tokens.list({ all: true });
    const live = tokens.filter((k) => failedIds.has(k.agentId) && k.revokedAt === null);
    expect(live.map((k) => k.agentId)).toEqual([]);
  });
});
