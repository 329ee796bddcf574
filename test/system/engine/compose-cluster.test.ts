/**
 * The compose example (examples/compose/docker-compose.yml), brought up with docker-compose on
 * Docker: PostgreSQL, two orchestrators sharing it, one static agent on each. Twenty jobs are
 * submitted alternately to the two orchestrators, each asking for one agent's label, so half of
 * each orchestrator's jobs can only run on the other orchestrator's agent: both hand out jobs, and
 * every job succeeds. `docker-compose down -v` then leaves no container, network or volume.
 *
 * No registry is reachable here, so the images are local: the orchestrator image from this
 * package (kici-admin image build-orchestrator) and a PostgreSQL image from the host's binaries
 * (scripts/build-postgres-image.ts), unless the system set-up already built them
 * (KICI_TEST_ORCHESTRATOR_IMAGE, KICI_TEST_POSTGRES_IMAGE); the agent image is the set-up's.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildOrchestratorImage } from '../../../src/image/build.js';
import { buildPostgresImage } from '../../../scripts/build-postgres-image.ts';
import { AGENT_IMAGE, docker, ENGINE } from '../../helpers/engine.js';
import { eventually, ROOT } from '../../helpers/orchestrator.js';

const tag = randomBytes(3).toString('hex');
const PROJECT = `kici-compose-${tag}`;
const COMPOSE_FILE = join(ROOT, 'examples/compose/docker-compose.yml');
const JOBS = 20;
const built: string[] = [];
let work = '';
let env: NodeJS.ProcessEnv = {};
const started = Date.now();
const secs = () => ((Date.now() - started) / 1000).toFixed(1);

function compose(args: string[], extra: NodeJS.ProcessEnv = {}): Promise<string> {
  return new Promise((ok, fail) => {
    const child = spawn('docker-compose', ['-p', PROJECT, '-f', COMPOSE_FILE, ...args], {
      env: { ...process.env, ...env, ...extra },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += String(d)));
    child.stderr.on('data', (d) => (out += String(d)));
    child.on('error', (err) =>
      fail(new Error(`docker-compose could not be run (${err.message}): install Debian's docker-compose`)),
    );
    child.on('close', (code) =>
      code === 0 ? ok(out) : fail(new Error(`docker-compose ${args.join(' ')}: exit ${code}\n${out}`)),
    );
  });
}

function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.on('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => ok(port));
    });
  });
}

async function api<T>(base: string, method: string, path: string, body?: unknown) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${env.ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as T };
}

/** What the project left in the engine, by compose's own project label. */
async function leftovers(): Promise<string[]> {
  const label = [`com.docker.compose.project=${PROJECT}`];
  const [cs, ns, vs] = await Promise.all([
    docker.listContainers({ all: true, filters: { label } }),
    docker.listNetworks({ filters: { label } }),
    docker.listVolumes({ filters: { label } }),
  ]);
  return [
    ...cs.map((c) => `container ${c.Names.join(',')}`),
    ...ns.map((n) => `network ${n.Name}`),
    ...(vs.Volumes ?? []).map((v) => `volume ${v.Name}`),
  ];
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'kici-compose-'));
  const host = process.env.DOCKER_HOST!;
  const say = () => {};
  const [orchestratorImage, postgresImage] = await Promise.all([
    process.env.KICI_TEST_ORCHESTRATOR_IMAGE ||
      buildOrchestratorImage({
        tag: `kici-test/orchestrator:${tag}`,
        engines: { hosts: [host], source: 'DOCKER_HOST' },
        say,
      }).then((r) => (built.push(r), r)),
    process.env.KICI_TEST_POSTGRES_IMAGE ||
      buildPostgresImage(host, `kici-test/postgres:${tag}`).then((r) => (built.push(r), r)),
  ]);
  console.log(`images ready at ${secs()} s`);
  const adminToken = randomBytes(24).toString('hex');
  const tokenFile = join(work, 'admin-token');
  // Read by the orchestrators' non-root user through the bind-mounted secret.
  await writeFile(tokenFile, `${adminToken}\n`, { mode: 0o644 });
  env = {
    KICI_DB_PASSWORD: randomBytes(12).toString('hex'),
    KICI_ADMIN_TOKEN_PATH: tokenFile,
    KICI_ORCHESTRATOR_IMAGE: orchestratorImage,
    KICI_POSTGRES_IMAGE: postgresImage,
    KICI_AGENT_IMAGE: AGENT_IMAGE,
    KICI_PORT_A: String(await freePort()),
    KICI_PORT_B: String(await freePort()),
    KICI_AGENT_A_LABELS: 'linux,compose-a',
    KICI_AGENT_B_LABELS: 'linux,compose-b',
    ADMIN_TOKEN: adminToken,
  };
});

afterAll(async () => {
  // Normally already down (the test asserts it); this is for a test that failed half-way.
  await compose(['--profile', 'agents', 'down', '-v', '--timeout', '5']).catch(() => undefined);
  for (const image of built)
    await docker
      .getImage(image)
      .remove({ force: true })
      .catch(() => undefined);
  if (work) await rm(work, { recursive: true, force: true });
});

describe(`compose example on ${ENGINE}`, () => {
  it('runs 20 jobs across both orchestrators, then down -v leaves nothing', async () => {
    expect(ENGINE, 'docker-compose speaks to Docker; this file runs in the Docker lane').toBe('docker');
    const t0 = Date.now();
    await compose(['up', '-d']);
    console.log(`compose up -d returned (PostgreSQL healthy, orchestrators started) at ${secs()} s`);
    const urls = [`http://127.0.0.1:${env.KICI_PORT_A}`, `http://127.0.0.1:${env.KICI_PORT_B}`];
    for (const url of urls)
      await eventually(
        async () => (await fetch(`${url}/readyz`).catch(() => undefined))?.ok,
        60_000,
        `${url} ready`,
      ).catch(async (err: Error) => {
        throw new Error(`${err.message}\n${await compose(['logs', '--no-color', '--tail', '40'])}`);
      });
    console.log(`orchestrators ready at ${secs()} s`);

    const tokens: Record<string, string> = {};
    for (const [id, label] of [
      ['agent-a', 'compose-a'],
      ['agent-b', 'compose-b'],
    ] as const) {
      const res = await api<{ token: string }>(urls[0]!, 'POST', '/api/v1/agents/tokens', {
        labels: ['linux', label],
        agentId: id,
      });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      tokens[id] = res.body.token;
    }
    await compose(['--profile', 'agents', 'up', '-d', 'agent-a', 'agent-b'], {
      KICI_AGENT_A_TOKEN: tokens['agent-a'],
      KICI_AGENT_B_TOKEN: tokens['agent-b'],
    });

    // Job i goes to orchestrator i % 2 and asks for agent (i >> 1) % 2: every pairing five times.
    const jobs: { id: string; submittedTo: number; wants: string }[] = [];
    for (let i = 0; i < JOBS; i++) {
      const wants = (i >> 1) % 2 ? 'agent-b' : 'agent-a';
      const res = await api<{ jobs: { id: string }[] }>(urls[i % 2]!, 'POST', '/api/v1/runs', {
        jobs: {
          [`j${i}`]: {
            runsOn: ['linux', wants === 'agent-a' ? 'compose-a' : 'compose-b'],
            steps: [{ run: `echo job ${i}` }],
          },
        },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      jobs.push({ id: res.body.jobs[0]!.id, submittedTo: i % 2, wants });
    }

    const FINAL = new Set(['succeeded', 'failed', 'cancelled', 'timed-out', 'no-backend']);
    const finished = await eventually(
      async () => {
        const views = await Promise.all(
          jobs.map(async (j, i) => {
            const r = await api<{ state: string; agentId: string | null }>(
              urls[(i + 1) % 2]!,
              'GET',
              `/api/v1/jobs/${j.id}`,
            );
            return { ...j, state: r.body.state, agentId: r.body.agentId };
          }),
        );
        return views.every((v) => FINAL.has(v.state)) && views;
      },
      60_000,
      'all 20 jobs final',
    ).catch(async (err: Error) => {
      throw new Error(
        `${err.message}\n${await compose(['--profile', 'agents', 'logs', '--no-color', '--tail', '40'])}`,
      );
    });
    console.log(`20 jobs final at ${secs()} s`);
    expect(finished.filter((v) => v.state !== 'succeeded')).toEqual([]);
    // Each agent dials only its own orchestrator, so the agent names who handed the job out.
    for (const v of finished) expect(v.agentId, `job ${v.id}`).toBe(v.wants);
    const handedOutBy = new Set(finished.map((v) => v.agentId));
    expect([...handedOutBy].sort()).toEqual(['agent-a', 'agent-b']);
    // Half of each orchestrator's submissions ran on the other one's agent.
    expect(finished.filter((v) => v.submittedTo === 0 && v.agentId === 'agent-b')).toHaveLength(5);
    expect(finished.filter((v) => v.submittedTo === 1 && v.agentId === 'agent-a')).toHaveLength(5);

    await compose(['--profile', 'agents', 'down', '-v', '--timeout', '10']);
    expect(await leftovers()).toEqual([]);
    console.log(
      `compose up → 20 jobs → down -v: ${((Date.now() - t0) / 1000).toFixed(1)} s (whole file ${secs()} s)`,
    );
  });
});
