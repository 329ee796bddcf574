/**
 * The API stays on loopback and container agents still work: the orchestrator listens on
 * 127.0.0.1 only, and opens an agent-only listener on the agent network's gateway. A job runs in a
 * fresh agent container; from inside it, the API is not reachable (404 on the gateway, nothing on
 * the container's own loopback).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ISOLATED_NETWORK_GATEWAY } from '../../../src/scaler/backends/container/network.js';
import { outputLines, submit } from '../../helpers/jobs.js';
import {
  containerScaler,
  ENGINE,
  RecordingIsolation,
  removeScalerContainers,
  scalerContainers,
} from '../../helpers/engine.js';
import { eventually, startTestOrchestrator, type TestOrchestrator } from '../../helpers/orchestrator.js';

const NAME = `lo-${ENGINE}`;
let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
  await removeScalerContainers(NAME);
});

/** Run with the agent image's own node: prints each URL's HTTP status, or the connection error. */
const PROBE = `for (const u of process.argv.slice(2)) {
  try { const r = await fetch(u); console.log('probe ' + u + ' ' + r.status); }
  catch (e) { console.log('probe ' + u + ' ' + (e.cause?.code ?? e.message)); }
}`;

async function statusOrError(url: string): Promise<string> {
  return fetch(url).then(
    (r) => String(r.status),
    (e: Error & { cause?: { code?: string } }) => e.cause?.code ?? e.message,
  );
}

describe(`the API on loopback, container agents on ${ENGINE}`, () => {
  it('runs a container job while the API answers on loopback only', async () => {
    t = await startTestOrchestrator({
      host: '127.0.0.1',
      isolation: new RecordingIsolation(),
      config: { version: 1, scalers: [containerScaler(NAME)] },
    });
    const port = new URL(t.orch.url).port;
    const gw = `http://${ISOLATED_NETWORK_GATEWAY}:${port}`;
    const urls = [`${gw}/api/v1/jobs`, `${gw}/metrics`, `${gw}/`, `http://127.0.0.1:${port}/api/v1/jobs`];
    const [jobId] = await submit(t, {
      probe: {
        runsOn: [NAME],
        steps: [
          {
            // The image's node runs through its own loader and libraries, as the agent does.
            run: [
              `cat > kici-probe.mjs <<'EOF'\n${PROBE}\nEOF`,
              'for L in /opt/kici/lib/ld-*; do break; done',
              `"$L" --library-path /opt/kici/lib /opt/kici/bin/node kici-probe.mjs ${urls.join(' ')}`,
              'echo done',
            ].join('\n'),
          },
        ],
      },
    });
    const job = await t.waitForJob(jobId!, undefined, 120_000);
    const lines = await outputLines(t, jobId!);
    expect(job.state, lines.join('\n')).toBe('succeeded');
    // The agent reached us, so the gateway listener took its connection: nothing else listens there.
    expect(t.orch.gatewayAddresses()).toEqual([ISOLATED_NETWORK_GATEWAY]);
    expect(lines).toContain(`probe ${gw}/api/v1/jobs 404`);
    expect(lines).toContain(`probe ${gw}/metrics 404`);
    expect(lines).toContain(`probe ${gw}/ 404`);
    // Inside the container, loopback is the container itself.
    expect(lines).toContain(`probe http://127.0.0.1:${port}/api/v1/jobs ECONNREFUSED`);
    // From the host, the API answers on loopback and not on the gateway.
    expect((await t.api('GET', '/api/v1/jobs')).status).toBe(200);
    // Podman takes its bridge (and the gateway address) down with the last container, so the
    // gateway may be unreachable by now; what it never does is answer the API.
    expect(await statusOrError(`${gw}/api/v1/jobs`)).toMatch(/^(404|E[A-Z]+)$/);
    await eventually(
      async () => (await scalerContainers(NAME)).length === 0,
      30_000,
      'agent container removed',
    );
    // Closed on stop.
    await t.stop();
    t = undefined;
    expect(await statusOrError(`${gw}/api/v1/jobs`)).toMatch(/^E/);
  });
});
