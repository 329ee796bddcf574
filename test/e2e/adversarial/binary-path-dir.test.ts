import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { UserError } from '../../../src/util/errors.js';
import { expectHealthy } from '../../helpers/adversarial.js';
import { vanishingBinary } from '../../helpers/vanishing-binary.js';
import { submit } from '../../helpers/jobs.js';
import {
  bareMetalConfig,
  eventually,
  startTestOrchestrator,
  type JobBody,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';
import { tempDir } from '../../helpers/temp-dirs.js';

/** A directory given as binaryPath passed the start-up check (X_OK holds for it). */

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

describe('adversarial: binaryPath names a directory', () => {
  it('stops start-up (the agent binary is a fatal required tool), naming the path', async () => {
    const dir = await tempDir('kici-agent-dir-');
    const err = await startTestOrchestrator({
      config: bareMetalConfig({}, [{ labels: ['linux'], binaryPath: dir }]),
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UserError);
    expect((err as UserError).message).toContain(
      `scaler "bm": agent binary of label set [linux]: ${dir} is a directory, not an executable file. Fix:`,
    );
  });

  it('a binary replaced by a directory after start-up fails the spawn as not-executable, naming the path', async () => {
    const dir = await tempDir('kici-agent-dir-');
    const bin = await vanishingBinary(join(dir, 'agent'));
    t = await startTestOrchestrator({
      config: bareMetalConfig({}, [{ labels: ['linux'], binaryPath: bin.path }]),
    });
    await bin.vanish();
    await mkdir(bin.path);
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
      `not-executable: agent binary ${bin.path} is a directory, not an executable file`,
    );
    await expectHealthy(t);
  });
});
