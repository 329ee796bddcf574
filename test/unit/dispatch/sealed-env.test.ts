/**
 * Sealed values (a provisioning job's claim code): handed to the agent with the job, never stored,
 * masked in the job's log; only the orchestrator that holds them dispatches the job. A real
 * Dispatcher on the real PGlite store, with a hand-driven agent.
 */
import type { Kysely } from 'kysely';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { newConnectedAgent } from '../../../src/dispatch/agent-registry.js';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { retryJob } from '../../../src/jobs/retry.js';
import { runSpecSchema } from '../../../src/jobs/run-spec.js';
import type { OrchestratorMessage } from '../../../src/protocol/messages.js';
import { ManualClock } from '../../../src/util/clock.js';
import { storePerFile } from '../../helpers/store-per-file.js';
import { databaseText } from '../../helpers/db-text.js';

const fresh = storePerFile();
const { stops } = fresh;

const CODE = 'c0de'.repeat(16);
const PAYLOAD = JSON.stringify({ agentId: 'scaler-event-1', claimCode: CODE });
const sealed = { env: { KICI_EVENT_PAYLOAD: PAYLOAD }, mask: [CODE, PAYLOAD] };
const spec = runSpecSchema.parse({
  jobs: { provision: { runsOn: ['linux'], env: { KICI_EVENT_ID: 'e-1' }, steps: [{ run: 'true' }] } },
});

function dispatcher(instanceId?: string, peerAlive?: (id: string) => Promise<boolean>) {
  const clock = new ManualClock();
  const d = new Dispatcher({
    store: fresh.store,
    clock,
    logger: pino({ level: 'silent' }),
    instanceId,
    ...(peerAlive && { peerAlive }),
  });
  stops.push(() => d.stop());
  return { d, clock };
}

function connect(d: Dispatcher, clock: ManualClock) {
  const messages: OrchestratorMessage[] = [];
  d.registry.add(
    newConnectedAgent({
      id: 'agent-1',
      labels: ['linux'],
      scaled: null,
      nowMs: clock.now(),
      send: (m) => void messages.push(m),
      close: () => {},
    }),
  );
  d.noteStaticToken('agent-1', ['linux'], null);
  return messages;
}

const storeText = () => databaseText(fresh.store.db as unknown as Kysely<unknown>);

describe('sealed job values', () => {
  it('reach the agent with the job, but never the store; the code is masked in the job log', async () => {
    const { d, clock } = dispatcher();
    const messages = connect(d, clock);
    const { jobs } = await d.submit(spec, sealed);
    const id = jobs[0]!.id;
    const stored = (await fresh.store.jobs.get(id))!.spec as {
      env: Record<string, string>;
      sealedEnv: string[];
    };
    expect(stored.sealedEnv).toEqual(['KICI_EVENT_PAYLOAD']);
    expect(stored.env).toEqual({ KICI_EVENT_ID: 'e-1' });

    await d.requestPump();
    const assign = messages.find((m) => m.type === 'job.assign');
    expect(assign?.type === 'job.assign' && assign.job.env).toEqual({
      KICI_EVENT_ID: 'e-1',
      KICI_EVENT_PAYLOAD: PAYLOAD,
    });
    d.logs.push([{ jobId: id, stepIdx: 0, stream: 'stdout', line: `code=${CODE}`, ts: new Date() }]);
    await d.logs.flush();
    await d.writes.flush();
    expect((await fresh.store.logs.list(id)).map((l) => l.line)).toEqual(['code=***']);
    expect(await storeText()).not.toContain(CODE);
  });

  it('another instance on the same store leaves the job queued for the one that holds them', async () => {
    const a = dispatcher('inst-a');
    const { jobs } = await a.d.submit(spec, sealed);
    const plain = await a.d.submit(
      runSpecSchema.parse({ jobs: { x: { runsOn: ['linux'], steps: [{ run: 'true' }] } } }),
    );
    const b = dispatcher('inst-b');
    expect(await b.d.resyncQueued()).toBe(1);
    expect(b.d.queue.get(jobs[0]!.id)).toBeUndefined();
    expect(b.d.queue.get(plain.jobs[0]!.id)).toBeDefined();
    expect(a.d.queue.get(jobs[0]!.id)).toBeDefined();
  });

  it('in a cluster, a peer fails a queued sealed job once its holder is gone, and not before', async () => {
    const a = dispatcher('inst-a');
    const { jobs } = await a.d.submit(spec, sealed);
    const id = jobs[0]!.id;
    expect(((await fresh.store.jobs.get(id))!.spec as { sealedBy?: string }).sealedBy).toBe('inst-a');
    await a.d.stop();
    const alive = new Set(['inst-a']);
    const b = dispatcher('inst-b', (peer) => Promise.resolve(alive.has(peer)));
    await b.d.resyncQueued();
    expect((await fresh.store.jobs.get(id))!.state).toBe('queued');
    alive.delete('inst-a');
    await b.d.resyncQueued();
    const row = (await fresh.store.jobs.get(id))!;
    expect(row.state).toBe('failed');
    expect(row.reason).toMatch(/claim code was held only in the memory of an orchestrator that stopped/);
  });

  it('alone on its store, a restart fails a queued sealed job, naming why; it cannot be retried', async () => {
    const first = dispatcher();
    const { jobs } = await first.d.submit(spec, sealed);
    const id = jobs[0]!.id;
    await first.d.stop();
    const second = dispatcher();
    expect(await second.d.recover()).toEqual({ queued: 0, awaiting: 0 });
    const row = (await fresh.store.jobs.get(id))!;
    expect(row.state).toBe('failed');
    expect(row.reason).toMatch(/claim code was held only in the memory of an orchestrator that stopped/);
    const retry = await retryJob(fresh.store, second.d, id, new Date());
    expect(retry.kind).toBe('sealed');
    expect(await fresh.store.jobs.list({ limit: 10 })).toHaveLength(1);
  });
});
