/**
 * `kici-admin scaler reap-orphans` against a container scaler on a real engine: containers of this
 * scaler that no live agent owns (one exited, one running with an agent nobody registered) and a
 * stale firewall rule set are listed by a dry run and removed by a real one; another scaler's
 * running container is never touched.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { NftAgentIsolation } from '../../../src/net/nft-isolation.js';
import { createNftRunner } from '../../../src/net/nft-runner.js';
import {
  BUSYBOX_IMAGE,
  containerScaler,
  docker,
  ENGINE,
  removeScalerContainers,
} from '../../helpers/engine.js';
import {
  ADMIN_BIN,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';

const tag = randomBytes(3).toString('hex');
const NAME = `reap-${ENGINE}-${tag}`;
const OTHER = `reapother-${ENGINE}-${tag}`;
const STALE_IP = `172.30.251.${10 + (parseInt(tag, 16) % 200)}`;
const iso = new NftAgentIsolation({ runner: createNftRunner(), table: `h2ro_${tag}` });
let t: TestOrchestrator | undefined;

afterEach(async () => {
  await t?.stop();
  t = undefined;
  await removeScalerContainers(NAME, OTHER);
});
afterAll(async () => {
  await iso.dropTable();
});

async function container(scaler: string, agentId: string, cmd: string[], wait: boolean): Promise<string> {
  const c = await docker.createContainer({
    Image: BUSYBOX_IMAGE,
    Cmd: cmd,
    Labels: { 'kici-managed': 'true', 'kici-scaler-name': scaler, 'kici-agent-id': agentId },
  });
  await c.start();
  if (wait) await c.wait();
  return c.id;
}

function admin(args: string[]) {
  return runNode([ADMIN_BIN, ...args], { KICI_SERVER_URL: t!.orch.url, KICI_ADMIN_TOKEN: t!.orch.adminToken })
    .exited;
}

type Report = {
  dryRun: boolean;
  items: { scaler: string; agentId: string | null; ref: string; reason: string }[];
};

describe(`reap-orphans on a ${ENGINE} container scaler`, () => {
  it('lists exited and unregistered containers of its scaler and stale rules, removes them for real, spares other scalers', async () => {
    t = await startTestOrchestrator({
      host: '0.0.0.0',
      isolation: iso,
      config: { version: 1, scalers: [containerScaler(NAME)] },
    });
    // Made after start-up, so the start-up sweep has not seen them.
    const exited = await container(NAME, `scaler-container-a${tag}`, ['true'], true);
    const running = await container(NAME, `scaler-container-b${tag}`, ['sleep', '300'], false);
    const foreign = await container(OTHER, `scaler-container-c${tag}`, ['sleep', '300'], false);
    await iso.apply({
      agentId: 'gone',
      scalerName: NAME,
      ip: STALE_IP,
      orchestrator: { address: '172.30.0.1', port: 1 },
      hostAccess: [],
      policy: undefined,
    });

    const dry = await admin(['scaler', 'reap-orphans', '--dry-run', '--json']);
    expect(dry.code, dry.stderr).toBe(0);
    const report = JSON.parse(dry.stdout) as Report;
    expect(report.dryRun).toBe(true);
    const byRef = new Map(report.items.map((i) => [i.ref, i]));
    expect(byRef.get(exited)).toMatchObject({ scaler: NAME, agentId: `scaler-container-a${tag}` });
    expect(byRef.get(running)).toMatchObject({ scaler: NAME, agentId: `scaler-container-b${tag}` });
    expect(byRef.get(running)!.reason).toMatch(/not registered/);
    expect(byRef.get(STALE_IP)).toMatchObject({ scaler: NAME, agentId: null });
    expect(byRef.has(foreign)).toBe(false);
    expect((await docker.getContainer(running).inspect()).State.Running).toBe(true);
    expect(await iso.listRuled()).toContain(STALE_IP);

    const real = await admin(['scaler', 'reap-orphans']);
    expect(real.code, real.stderr).toBe(0);
    expect(real.stdout).toMatch(/removed 3:/);
    const left = await docker.listContainers({ all: true, filters: { label: [`kici-scaler-name=${NAME}`] } });
    expect(left).toEqual([]);
    expect((await docker.getContainer(foreign).inspect()).State.Running).toBe(true);
    expect(await iso.listRuled()).not.toContain(STALE_IP);
  });
});
