import { mkdtemp, rm } from 'node:fs/promises';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { startOrchestratorAs } from '../helpers/as-user.js';
import { outputLines, submit } from '../helpers/jobs.js';
import { AGENT_BIN } from '../helpers/orchestrator.js';

/**
 * An orchestrator that is not root, on a host with no systemd user manager (this one: PID 1 is not
 * systemd), asked to enforce bare-metal limits: it cannot, so it says so once at start-up with the
 * fix, shows a WARN row in `diagnose`, and still runs the job (without limits).
 */

let stopUser: (() => Promise<void>) | undefined;
let base: string | undefined;
afterEach(async () => {
  await stopUser?.();
  stopUser = undefined;
  if (base) await rm(base, { recursive: true, force: true });
  base = undefined;
});

describe('bare-metal limits as an unprivileged user without a user manager', () => {
  it('warns once that the limits are advisory, shows WARN limits:<scaler> in diagnose, and runs the job', async () => {
    base = await mkdtemp('/tmp/kici-limits-advisory-');
    const u = await startOrchestratorAs(base, inject('templateDataDir'), {
      version: 1,
      scalers: [
        {
          name: 'bm',
          type: 'bare-metal',
          maxAgents: 1,
          enforceCgroups: true,
          labelSets: [
            {
              labels: ['linux', 'limited'],
              binaryPath: AGENT_BIN,
              trust: 'host',
              resources: { limits: { cpus: 0.5, memory: '96m' } },
            },
          ],
        },
      ],
    });
    stopUser = u.stop;
    const warned = u
      .output()
      .split('\n')
      .filter((l) => l.includes('enforceCgroups is set but agents start without'));
    expect(warned, u.output()).toHaveLength(1);
    expect(warned[0]).toMatch(/advisory.*Fix: run the orchestrator as root.*loginctl enable-linger/);

    const d = await u.api<{ checks: { name: string; status: string; message: string }[] }>(
      'GET',
      '/api/v1/scaler/diagnose',
    );
    expect(d.status).toBe(200);
    expect(d.body.checks.filter((c) => c.name === 'limits:bm')).toMatchObject([
      {
        name: 'limits:bm',
        status: 'WARN',
        message: expect.stringMatching(/advisory.*enable-linger/),
        details: { strategy: 'advisory' },
      },
    ]);

    const t0 = { api: u.api };
    const [job] = await submit(t0, { hello: { runsOn: ['linux', 'limited'], steps: [{ run: 'echo ran' }] } });
    expect((await u.waitForJob(job!)).state).toBe('succeeded');
    expect(await outputLines(t0, job!)).toContain('ran');
    // Still once: no spawn repeats it.
    expect(
      u
        .output()
        .split('\n')
        .filter((l) => l.includes('enforceCgroups is set but agents start without')),
    ).toHaveLength(1);
  });
});
