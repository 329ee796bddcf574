/**
 * `kici-admin scaler audit` on the container backend: a running container of the scaler that no
 * record accounts for is drift (exit 1), `--fix` removes it through the backend, and afterwards the
 * audit is clean (exit 0). Another scaler's container is never touched.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  BUSYBOX_IMAGE,
  ENGINE,
  RecordingIsolation,
  containerScaler,
  docker,
  removeScalerContainers,
  scalerContainers,
} from '../../helpers/engine.js';
import {
  ADMIN_BIN,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';

const NAME = `audit-${ENGINE}`;
const OTHER = `audit-other-${ENGINE}`;
let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
  await removeScalerContainers(NAME, OTHER);
});

async function stray(scaler: string, agentId: string): Promise<string> {
  const c = await docker.createContainer({
    Image: BUSYBOX_IMAGE,
    Cmd: ['sleep', '600'],
    Labels: { 'kici-managed': 'true', 'kici-scaler-name': scaler, 'kici-agent-id': agentId },
  });
  await c.start();
  return c.id;
}

async function audit(...args: string[]) {
  const r = await runNode([ADMIN_BIN, 'scaler', 'audit', '--json', ...args], {
    KICI_SERVER_URL: t!.orch.url,
    KICI_ADMIN_TOKEN: t!.orch.adminToken,
  }).exited;
  return {
    code: r.code,
    stderr: r.stderr,
    report: JSON.parse(r.stdout || '{}') as {
      drift: { kind: string; resource: string; scaler: string; agentId: string; ref: string }[];
      remaining?: unknown[];
    },
  };
}

describe(`scaler audit on ${ENGINE}`, () => {
  it('reports an unrecorded container, --fix removes it, and spares another scaler', async () => {
    t = await startTestOrchestrator({
      host: '0.0.0.0',
      isolation: new RecordingIsolation(),
      scalerAuditIntervalMs: 0,
      config: { version: 1, scalers: [containerScaler(NAME)] },
    });
    const clean = await audit();
    expect(clean.code, clean.stderr).toBe(0);

    const id = await stray(NAME, 'scaler-container-stray');
    const other = await stray(OTHER, 'scaler-container-other');
    const drifted = await audit();
    expect(drifted.code, drifted.stderr).toBe(1);
    expect(drifted.report.drift).toEqual([
      {
        kind: 'unrecorded-compute',
        resource: 'container',
        scaler: NAME,
        agentId: 'scaler-container-stray',
        ref: id,
      },
    ]);

    const fixed = await audit('--fix');
    expect(fixed.code, fixed.stderr).toBe(0);
    expect(fixed.report.remaining).toEqual([]);
    expect(await scalerContainers(NAME)).toEqual([]);
    expect((await scalerContainers(OTHER)).map((c) => c.Id)).toEqual([other]);
    expect((await audit()).code).toBe(0);
  });
});
