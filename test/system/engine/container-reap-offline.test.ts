/**
 * `kici-admin scaler reap-orphans` on a real engine with no orchestrator running (as when a full
 * data disk keeps it from starting): the command builds the container scaler's sweeper from the
 * scaler config alone. This scaler's stopped containers (exited, or created and never started) go;
 * its running one (whose agent may be live: there is no registry to ask) and another scaler's
 * containers stay. The data dir cannot be written, and no admin token exists.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  BUSYBOX_IMAGE,
  containerScaler,
  docker,
  ENGINE,
  removeScalerContainers,
} from '../../helpers/engine.js';
import { ADMIN_BIN, runNode, writeConfig } from '../../helpers/orchestrator.js';

const tag = randomBytes(3).toString('hex');
const NAME = `reapoff-${ENGINE}-${tag}`;
const OTHER = `reapoffother-${ENGINE}-${tag}`;
const dirs: string[] = [];

afterAll(async () => {
  await removeScalerContainers(NAME, OTHER);
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

async function container(scaler: string, agentId: string, how: 'exited' | 'created' | 'running') {
  const c = await docker.createContainer({
    Image: BUSYBOX_IMAGE,
    Cmd: how === 'exited' ? ['true'] : ['sleep', '300'],
    Labels: { 'kici-managed': 'true', 'kici-scaler-name': scaler, 'kici-agent-id': agentId },
  });
  if (how !== 'created') await c.start();
  if (how === 'exited') await c.wait();
  return c.id;
}

type Report = {
  dryRun: boolean;
  items: { scaler: string; agentId: string | null; ref: string }[];
  errors: unknown[];
  offline?: { reason: string };
};

describe(`reap-orphans on ${ENGINE} with the orchestrator stopped`, () => {
  it("removes only this scaler's stopped containers, without the orchestrator, its data dir or a token", async () => {
    const base = await mkdtemp(join(tmpdir(), 'kici-reapoff-'));
    dirs.push(base);
    await writeFile(join(base, 'not-a-dir'), '');
    const unwritable = join(base, 'not-a-dir', 'data');
    // Isolation off: the sweep then leaves every firewall table alone (other tests share the host's).
    const config = await writeConfig({
      version: 1,
      scalers: [containerScaler(NAME, { networkIsolation: false })],
    });
    dirs.push(join(config, '..'));
    const exited = await container(NAME, `scaler-container-a${tag}`, 'exited');
    const created = await container(NAME, `scaler-container-b${tag}`, 'created');
    const running = await container(NAME, `scaler-container-c${tag}`, 'running');
    const foreignExited = await container(OTHER, `scaler-container-d${tag}`, 'exited');
    const admin = (args: string[]) =>
      runNode([ADMIN_BIN, '--server', 'http://127.0.0.1:1', '--data-dir', unwritable, ...args], {
        KICI_ADMIN_TOKEN: '',
        KICI_ADMIN_TOKEN_FILE: join(unwritable, 'admin-token'),
        KICI_DATA_DIR: unwritable,
        KICI_SCALER_CONFIG_PATH: config,
      }).exited;

    const listed = await admin(['scaler', 'orphans', '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    const dry = JSON.parse(listed.stdout) as Report;
    expect(dry.offline?.reason).toMatch(/no answer/);
    expect(dry.items.map((i) => i.ref).sort()).toEqual([exited, created].sort());
    expect(await docker.getContainer(exited).inspect()).toBeTruthy();

    const reaped = await admin(['scaler', 'reap-orphans', '--json']);
    expect(reaped.code, reaped.stderr).toBe(0);
    const report = JSON.parse(reaped.stdout) as Report;
    expect(report.dryRun).toBe(false);
    expect(report.errors).toEqual([]);
    expect(report.items.map((i) => i.ref).sort()).toEqual([exited, created].sort());
    const left = await docker.listContainers({ all: true, filters: { label: [`kici-scaler-name=${NAME}`] } });
    expect(left.map((c) => c.Id)).toEqual([running]);
    expect((await docker.getContainer(running).inspect()).State.Running).toBe(true);
    expect((await docker.getContainer(foreignExited).inspect()).State.Status).toBe('exited');
  });
});
