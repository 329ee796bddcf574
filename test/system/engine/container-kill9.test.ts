/**
 * kill -9 of the orchestrator while container agents run jobs: after the restart (same data dir and
 * port) the jobs finish or are requeued and finish, and no agent container is left.
 */
import { readFile, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { adminApi, freePort, killServe, startServe, type ServeProcess } from '../../helpers/crash.js';
import { freshDataDir } from '../../helpers/data-dir.js';
import {
  AGENT_IMAGE,
  ENGINE,
  ENGINE_SOCKET,
  removeScalerContainers,
  scalerContainers,
} from '../../helpers/engine.js';
import { eventually, writeConfig } from '../../helpers/orchestrator.js';

const NAME = `kill9-${ENGINE}`;
let first: ServeProcess | undefined;
let second: ServeProcess | undefined;
const dirs: string[] = [];
afterEach(async () => {
  await killServe(first);
  await killServe(second);
  first = second = undefined;
  await removeScalerContainers(NAME);
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

interface JobBody {
  state: string;
  attempts?: number;
}

describe(`kill -9 of the orchestrator with ${ENGINE} agents running`, () => {
  it('finishes or requeues their jobs after the restart and leaves no container', async () => {
    const port = await freePort();
    const dataDir = await freshDataDir();
    // A serve process cannot be handed a test firewall, so this scaler runs without isolation.
    const config = await writeConfig({
      version: 1,
      scalers: [
        {
          name: NAME,
          type: 'container',
          maxAgents: 4,
          socketPath: ENGINE_SOCKET,
          networkIsolation: false,
          labelSets: [{ labels: [NAME], image: AGENT_IMAGE, imagePullPolicy: 'Never' }],
        },
      ],
    });
    dirs.push(dataDir, dirname(config));
    first = await startServe({ config, port, dataDir, host: '0.0.0.0' });
    const token = (await readFile(process.env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim();
    const api = adminApi(first.url, token);
    const run = await api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        a: { runsOn: [NAME], steps: [{ run: 'echo a-start; sleep 6; echo a-end' }] },
        b: { runsOn: [NAME], steps: [{ run: 'echo b-start; sleep 6; echo b-end' }] },
      },
    });
    expect(run.status).toBe(201);
    const ids = run.body.jobs.map((j) => j.id);
    const state = async (id: string) => (await api<JobBody>('GET', `/api/v1/jobs/${id}`)).body.state;
    await eventually(
      async () => (await Promise.all(ids.map(state))).every((s) => s === 'running'),
      90_000,
      'both jobs running in containers',
    ).catch((err: unknown) => {
      throw new Error(`${String(err)}\n${first!.output().stdout.split('\n').slice(-15).join('\n')}`);
    });
    expect((await scalerContainers(NAME)).filter((c) => c.State === 'running')).toHaveLength(2);

    await killServe(first);
    first = undefined;
    // The agents outlive the orchestrator: their containers keep running through the outage.
    expect((await scalerContainers(NAME)).filter((c) => c.State === 'running').length).toBeGreaterThan(0);

    second = await startServe({ config, port, dataDir, host: '0.0.0.0' });
    const final = ['succeeded', 'failed', 'cancelled', 'timed-out'];
    await eventually(
      async () => (await Promise.all(ids.map(state))).every((s) => final.includes(s)),
      180_000,
      'both jobs final after the restart',
    );
    for (const id of ids) expect(await state(id)).toBe('succeeded');
    await eventually(
      async () => (await scalerContainers(NAME)).length === 0,
      60_000,
      'no agent container left',
    );
  });
});
