import { afterEach, describe, expect, it } from 'vitest';
import { expectHealthy } from '../../helpers/adversarial.js';
import { submit } from '../../helpers/jobs.js';
import { bareMetalConfig, startTestOrchestrator, type TestOrchestrator } from '../../helpers/orchestrator.js';

/**
 * Node clamps a timer delay above 2^31-1 ms to 1 ms, so a job timeout of 2,147,454 s or more (with
 * the server's 30 s backstop) or a step timeout of 2,147,484 s or more fired at once. 2,200,000 s
 * (about 25 days) is over both limits and under any sane maximum.
 */

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

describe('adversarial: timeouts beyond the 32-bit timer limit', () => {
  it('a 25-day job and step timeout do not fire at once', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig() });
    const [id] = await submit(t, {
      long: {
        runsOn: ['linux', 'small'],
        timeoutSeconds: 2_200_000,
        steps: [{ name: 'wait', run: 'sleep 2; echo ok', timeoutSeconds: 2_200_000 }],
      },
    });
    const job = await t.waitForJob(id!, undefined, 30_000);
    expect(job.reason).toBeNull();
    expect(job.state).toBe('succeeded');
    await expectHealthy(t);
  });
});
