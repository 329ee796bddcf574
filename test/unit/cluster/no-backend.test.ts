/**
 * In a cluster, "no backend" must count agent tokens issued through another instance. A real
 * Dispatcher on the real PGlite store; the token is written to the shared store after the
 * dispatcher read its tokens, as when a peer issues it.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { runSpecSchema } from '../../../src/jobs/run-spec.js';
import { systemClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';

let fresh: Awaited<ReturnType<typeof freshStore>>;
beforeAll(async () => {
  fresh = await freshStore();
}, 60_000);
afterAll(async () => {
  await fresh.close();
});

const spec = (label: string) =>
  runSpecSchema.parse({ jobs: { a: { runsOn: ['linux', label], steps: [{ run: 'true' }] } } });

describe('no-backend judgement in a cluster', () => {
  it('a job waits when a peer issued a matching token after this instance read the tokens; without one it is no-backend', async () => {
    const d = new Dispatcher({
      store: fresh.store,
      clock: systemClock,
      logger: pino({ level: 'silent' }),
      instanceId: 'nb-1',
    });
    await d.recover();
    await fresh.store.tokens.mint({
      agentId: 'peer-agent',
      labels: ['linux', 'nb-peer'],
      kind: 'static',
      now: new Date(),
    });
    const waiting = (await d.submit(spec('nb-peer'))).jobs[0]!.id;
    const orphan = (await d.submit(spec('nb-none'))).jobs[0]!.id;
    await d.requestPump();
    expect((await fresh.store.jobs.get(waiting))!.state).toBe('queued');
    expect(d.queue.get(waiting)?.waiting).toBe('waiting for a matching agent');
    expect((await fresh.store.jobs.get(orphan))!.state).toBe('no-backend');
    await d.stop();
  });
});
