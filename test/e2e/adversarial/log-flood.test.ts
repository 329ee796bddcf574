import { afterEach, describe, expect, it } from 'vitest';
import { bystanderJob, expectHealthy } from '../../helpers/adversarial.js';
import { submit } from '../../helpers/jobs.js';
import { bareMetalConfig, startTestOrchestrator, type TestOrchestrator } from '../../helpers/orchestrator.js';

/**
 * 60 MB of control characters on stdout. JSON escapes each as `\u0001`, six bytes, so a naive log
 * batch became a frame of hundreds of MB and the server died. The agent now cuts batches by their
 * serialized size (docs/step-runner.md, "Output").
 */

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

describe('adversarial: a step floods its output with control characters', () => {
  it('60 MB of \\x01: the job succeeds, the server lives, a bystander job is untouched', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig() });
    const bystander = await bystanderJob(t, ['linux', 'small']);
    const [id] = await submit(t, {
      flood: {
        runsOn: ['linux', 'large'],
        steps: [{ name: 'flood', run: "head -c 60000000 /dev/zero | tr '\\0' '\\1'; echo; echo flood done" }],
      },
    });
    const job = await t.waitForJob(id!, undefined, 240_000);
    expect(job.state).toBe('succeeded');
    expect(job.exitCode).toBe(0);
    await expectHealthy(t);
    await bystander.check();
  });
});
