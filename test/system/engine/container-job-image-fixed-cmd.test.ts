/**
 * An operator-built agent image without the kici.runtime.cmd label still runs job images: the
 * backend starts the fixed Node-plus-agent command from the injected runtime. The image here is
 * ours with the label emptied and /opt/kici/bin/node made a wrapper script that leaves a mark, so
 * the job can see that the fixed command is what started its agent.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { outputLines, submit } from '../../helpers/jobs.js';
import {
  AGENT_IMAGE,
  BUSYBOX_IMAGE,
  containerScaler,
  docker,
  ENGINE,
  RecordingIsolation,
  removeScalerContainers,
} from '../../helpers/engine.js';
import { startTestOrchestrator, type TestOrchestrator } from '../../helpers/orchestrator.js';

const NAME = `fixedcmd-${ENGINE}`;
const REPO = `kici-test/agent-nolabel-${randomUUID().slice(0, 8)}`;
const DERIVED = `${REPO}:1`;
let derivedId = '';
let t: TestOrchestrator | undefined;

beforeAll(async () => {
  const info = await docker.getImage(AGENT_IMAGE).inspect();
  const loader = info.Config.Labels!['kici.runtime.cmd']!.split(',')[0]!;
  // Node (the agent image has no shell) moves itself aside and writes the wrapper in its place.
  const wrapper = [
    '#!/bin/sh',
    'echo started-by-fixed-command > /tmp/kici-fixed-cmd',
    `exec ${loader} --library-path /opt/kici/lib /opt/kici/bin/node-real "$@"`,
    '',
  ].join('\n');
  const script = `const fs = require('fs'); fs.renameSync('/opt/kici/bin/node', '/opt/kici/bin/node-real'); fs.writeFileSync('/opt/kici/bin/node', ${JSON.stringify(wrapper)}, { mode: 0o755 });`;
  const c = await docker.createContainer({
    Image: AGENT_IMAGE,
    Cmd: [loader, '--library-path', '/opt/kici/lib', '/opt/kici/bin/node', '-e', script],
    NetworkDisabled: true,
  });
  try {
    await c.start();
    expect((await c.wait()).StatusCode).toBe(0);
    await c.commit({ repo: REPO, tag: '1', changes: 'LABEL kici.runtime.cmd=' });
  } finally {
    await c.remove({ force: true });
  }
  const derived = await docker.getImage(DERIVED).inspect();
  derivedId = derived.Id;
  expect(derived.Config.Labels?.['kici.runtime.cmd'] ?? '').toBe('');
}, 120_000);

afterEach(async () => {
  await t?.stop();
  t = undefined;
  await removeScalerContainers(NAME);
});

afterAll(async () => {
  const volume = `kici-runtime-${derivedId.replace(/^sha256:/, '').slice(0, 16)}`;
  await docker
    .getVolume(volume)
    .remove()
    .catch(() => undefined); // never created if the test failed before its spawn
  await docker
    .getImage(DERIVED)
    .remove({ force: true })
    .catch(() => undefined);
});

describe(`job images with an agent image that has no kici.runtime.cmd label on ${ENGINE}`, () => {
  it('runs the job through the fixed Node-plus-agent command', async () => {
    t = await startTestOrchestrator({
      host: '0.0.0.0',
      isolation: new RecordingIsolation(),
      config: {
        version: 1,
        scalers: [containerScaler(NAME, {}, [{ labels: [NAME], image: DERIVED, imagePullPolicy: 'Never' }])],
      },
    });
    const [jobId] = await submit(t, {
      fixed: {
        runsOn: [NAME],
        container: { image: BUSYBOX_IMAGE },
        steps: [{ run: 'cat /tmp/kici-fixed-cmd; echo "agent=$KICI_JOB_IMAGE_AGENT"' }],
      },
    });
    const job = await t.waitForJob(jobId!, undefined, 120_000);
    const lines = await outputLines(t, jobId!);
    expect(job.state, lines.join('\n')).toBe('succeeded');
    expect(lines).toContain('started-by-fixed-command');
    expect(lines).toContain('agent=1');
  });
});
