import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { expectHealthy } from '../../helpers/adversarial.js';
import { submit } from '../../helpers/jobs.js';
import {
  bareMetalConfig,
  eventually,
  startTestOrchestrator,
  type JobBody,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';

/** Issue #7, defect 12: a directory given as binaryPath passed the start-up check (X_OK holds for it). */

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

describe('adversarial: binaryPath names a directory', () => {
  it('is flagged at start-up and fails the spawn as not-executable, naming the path', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kici-agent-dir-'));
    const logged: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (s: string) => void logged.push(s) });
    t = await startTestOrchestrator({
      config: bareMetalConfig({}, [{ labels: ['linux'], binaryPath: dir }]),
      logger,
    });
    const startup = logged.map((l) => (JSON.parse(l) as { msg: string }).msg);
    expect(startup).toContainEqual(
      expect.stringContaining(
        `scaler "bm": agent binary of label set [linux]: ${dir} is a directory, not an executable file. Fix:`,
      ),
    );

    const [id] = await submit(t, { a: { runsOn: ['linux'], steps: [{ run: 'true' }] } });
    const job = await eventually(
      async () => {
        const j = (await t!.api<JobBody>('GET', `/api/v1/jobs/${id}`)).body;
        return j.lastProvisioningError ? j : undefined;
      },
      10_000,
      'provisioning error on the job',
    );
    expect(job.lastProvisioningError).toBe(
      `not-executable: agent binary ${dir} is a directory, not an executable file`,
    );
    await expectHealthy(t);
  });
});
