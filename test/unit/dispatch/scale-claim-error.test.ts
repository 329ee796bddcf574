/**
 * A store failure while taking the right to provision for a job is not "another orchestrator
 * provisions it": it is logged, the job says why it waits, nothing is spawned, and the next pass
 * asks again and provisions.
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Dispatcher } from '../../../src/dispatch/dispatcher.js';
import { runSpecSchema } from '../../../src/jobs/run-spec.js';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const hs = useManagerHarnesses();

describe('scale claim store error', () => {
  it('is logged and retried, never read as a peer provisioning the job', async () => {
    const h = await hs.make({
      config: { version: 1, scalers: [bareMetal('alpha', [['linux']])] },
      dispatcher: false,
    });
    const lines: string[] = [];
    const logger = pino(
      { level: 'warn' },
      new Writable({
        write(chunk, _e, cb) {
          lines.push(String(chunk));
          cb();
        },
      }),
    );
    let failing = true;
    const d = new Dispatcher({
      store: h.store,
      clock: h.clock,
      logger,
      scaler: h.manager,
      instanceId: 'orch-1',
      scaleClaim: () => (failing ? Promise.reject(new Error('connection reset')) : Promise.resolve('mine')),
    });
    const { jobs } = await d.submit(
      runSpecSchema.parse({ jobs: { a: { runsOn: ['linux'], steps: [{ run: 'true' }] } } }),
    );
    await d.requestPump();
    await h.settle();
    const jobId = jobs[0]!.id;
    expect(h.backend('alpha').spawns).toEqual([]);
    expect(d.queue.get(jobId)?.waiting).toMatch(/cannot reach the store.*connection reset.*retrying/);
    expect(d.queue.get(jobId)?.waiting).not.toMatch(/another orchestrator/);
    const logged = lines.map((l) => JSON.parse(l) as { msg: string; jobId?: string; err?: string });
    expect(logged).toContainEqual(
      expect.objectContaining({
        msg: 'could not take the right to provision for a job; will try again',
        jobId,
        err: 'connection reset',
      }),
    );
    failing = false;
    await d.requestPump();
    await h.settle();
    expect(h.backend('alpha').spawns.map((s) => s.boundJobId)).toEqual([jobId]);
    await d.stop?.();
  });
});
