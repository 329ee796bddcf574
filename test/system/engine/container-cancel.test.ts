/**
 * Cancelling a running job on a container scaler ends its agent's compute: the single-use agent
 * leaves after the cancel and the manager removes its container, for an agent-image job and for a
 * job-image job alike. Nothing may wait for the orchestrator's shutdown.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { submit } from '../../helpers/jobs.js';
import {
  BUSYBOX_IMAGE,
  containerScaler,
  ENGINE,
  RecordingIsolation,
  removeScalerContainers,
  scalerContainers,
} from '../../helpers/engine.js';
import { eventually, startTestOrchestrator, type TestOrchestrator } from '../../helpers/orchestrator.js';

const NAME = `cancel-${ENGINE}`;
let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
  await removeScalerContainers(NAME);
});

describe(`cancel on a container scaler (${ENGINE})`, () => {
  for (const image of [undefined, BUSYBOX_IMAGE]) {
    it(`${image ? 'a job-image' : 'an agent-image'} job: cancelled while running, its container is removed`, async () => {
      t = await startTestOrchestrator({
        host: '0.0.0.0',
        isolation: new RecordingIsolation(),
        config: { version: 1, scalers: [containerScaler(NAME)] },
      });
      const [jobId] = await submit(t, {
        long: {
          runsOn: [NAME],
          ...(image ? { container: { image } } : {}),
          steps: [{ run: 'echo started; sleep 300' }],
        },
      });
      await t.waitForJob(jobId!, ['running'], 120_000);
      expect((await scalerContainers(NAME)).length).toBe(1);
      const res = await t.api('POST', `/api/v1/jobs/${jobId!}/cancel`);
      expect(res.status).toBe(200);
      expect((await t.waitForJob(jobId!)).state).toBe('cancelled');
      await eventually(
        async () => (await scalerContainers(NAME)).length === 0,
        30_000,
        'the cancelled job’s agent container to be removed',
      );
      expect(t.orch.scaler!.entries()).toHaveLength(0);
    });
  }
});
