/**
 * Bare-metal job-image agents with the API on loopback: their containers sit on kici-agent-net and
 * dial the host at its gateway, so the orchestrator opens its agent-only listener there, as it does
 * for container scalers. The scaler's process agents keep dialling loopback on the same scaler.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ISOLATED_NETWORK_GATEWAY } from '../../../src/scaler/backends/container/network.js';
import { outputLines, submit } from '../../helpers/jobs.js';
import {
  AGENT_IMAGE,
  BUSYBOX_IMAGE,
  ENGINE,
  ENGINE_SOCKET,
  RecordingIsolation,
  removeScalerContainers,
} from '../../helpers/engine.js';
import {
  AGENT_BIN,
  startTestOrchestrator,
  trustedHost,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';

const NAME = `bmjilo-${ENGINE}`;
let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
  await removeScalerContainers(NAME);
});

describe(`bare-metal job-image agents with the API on loopback, on ${ENGINE}`, () => {
  it('a job-image job and a process job both run while the API listens on 127.0.0.1 only', async () => {
    t = await startTestOrchestrator({
      host: '127.0.0.1',
      isolation: new RecordingIsolation(),
      config: {
        version: 1,
        scalers: [
          {
            name: NAME,
            type: 'bare-metal',
            maxAgents: 2,
            socketPath: ENGINE_SOCKET,
            labelSets: [
              { labels: [`${NAME}-img`], image: AGENT_IMAGE, imagePullPolicy: 'Never' },
              trustedHost({ labels: [`${NAME}-proc`], binaryPath: AGENT_BIN }),
            ],
          },
        ],
      },
    });
    const [inImage, onHost] = await submit(t, {
      img: {
        runsOn: [`${NAME}-img`],
        container: { image: BUSYBOX_IMAGE },
        steps: [{ run: 'echo "in-image agent=$KICI_JOB_IMAGE_AGENT"' }],
      },
      proc: { runsOn: [`${NAME}-proc`], steps: [{ run: 'echo on-host' }] },
    });
    for (const [id, line] of [
      [inImage!, 'in-image agent=1'],
      [onHost!, 'on-host'],
    ] as const) {
      const job = await t.waitForJob(id, undefined, 120_000);
      const lines = await outputLines(t, id);
      expect(job.state, lines.join('\n')).toBe('succeeded');
      expect(lines).toContain(line);
    }
    // The job-image agent reached us, so through the gateway listener: nothing else listens there.
    expect(t.orch.gatewayAddresses()).toEqual([ISOLATED_NETWORK_GATEWAY]);
  });
});
