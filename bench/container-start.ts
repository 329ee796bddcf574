/**
 * Cold container job start (submit → first step, median of N, one job at a time) on the engine
 * DOCKER_HOST names, beside a raw start of the same agent image through the same engine API that
 * connects to a bare WebSocket server (time to its first message), measured in the same run, one
 * of each in turn. The same pair for a job in its own image (busybox with the injected agent runtime).
 *
 * Needs an engine: DOCKER_HOST=unix://<socket>, KICI_BENCH_ENGINE=docker|podman, the agent image
 * (npm run image:agent; KICI_TEST_AGENT_IMAGE overrides), a job image (KICI_TEST_BUSYBOX_IMAGE,
 * default kici-test/busybox:1), and this process in a network namespace where the agent network's
 * gateway is a local address (the system tier's kici-docker / kici-podman namespaces):
 *   DOCKER_HOST=unix:///tmp/kici-sys/docker.sock KICI_BENCH_ENGINE=docker \
 *     nsenter --net=/run/netns/kici-docker npm run bench -- container
 * Without DOCKER_HOST the bench is skipped with that reason. Our starts include the real nftables
 * rules (the default), so run it as root in that namespace; the raw start has no firewall and runs
 * on a plain bridge network of its own.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { pino } from 'pino';
import { WebSocketServer } from 'ws';
import { Orchestrator } from '../dist/server/orchestrator.js';
import { ensureRuntimeVolume, RUNTIME_MOUNT } from '../dist/scaler/backends/container/job-image.js';
import { ensureIsolatedNetwork } from '../dist/scaler/backends/container/network.js';
import { packageVersion } from '../dist/version.js';
import { fmt, median, percentile, type BenchResult } from './stats.ts';

function skipped(reason: string): BenchResult[] {
  return [
    {
      name: 'cold container job start',
      value: NaN,
      unit: 'ms',
      target: 'ratio ≤ 1.3',
      pass: true,
      detail: `skipped: ${reason}`,
    },
  ];
}

type Runtime = { volume: string; cmd: string[] };

/**
 * The raw start's own plain bridge network: on kici-agent-net our table would refuse a container
 * with no rules of its own, and the raw start has no firewall by definition.
 */
const RAW_NETWORK = 'kici-bench-raw';
const RAW_SUBNET = '10.231.0.0/24';
const RAW_GATEWAY = '10.231.0.1';

async function ensureRawNetwork(docker: Docker): Promise<void> {
  const exists = await docker
    .getNetwork(RAW_NETWORK)
    .inspect()
    .then(
      () => true,
      () => false,
    );
  if (!exists)
    await docker.createNetwork({
      Name: RAW_NETWORK,
      Driver: 'bridge',
      IPAM: { Config: [{ Subnet: RAW_SUBNET, Gateway: RAW_GATEWAY }] },
    });
}

/** A raw start: create + start the image, time to the agent's first WebSocket message. */
async function rawStart(docker: Docker, wss: WebSocketServer, image: string, i: number, runtime?: Runtime) {
  const port = (wss.address() as { port: number }).port;
  const first = new Promise<number>((res) =>
    wss.once('connection', (ws) => ws.once('message', () => res(performance.now()))),
  );
  const t0 = performance.now();
  const c = await docker.createContainer({
    Image: image,
    Env: [
      `KICI_ORCHESTRATOR_URL=ws://${RAW_GATEWAY}:${port}/ws`,
      `KICI_AGENT_ID=raw-${i}`,
      'KICI_AGENT_TOKEN=raw',
      'KICI_LABELS=bench',
      'KICI_SCALER_MANAGED=1',
    ],
    ...(runtime ? { Entrypoint: runtime.cmd, Cmd: [] } : {}),
    HostConfig: {
      NetworkMode: RAW_NETWORK,
      ...(runtime ? { Binds: [`${runtime.volume}:${RUNTIME_MOUNT}:ro`] } : {}),
    },
    Labels: { 'kici-bench': 'raw' },
  });
  await c.start();
  const ms = (await first) - t0;
  await c.remove({ force: true });
  return ms;
}

/** One of our starts: submit a one-step job, time to its first step's start. */
async function ourStart(orch: Orchestrator, docker: Docker, jobImage?: string): Promise<number> {
  const wall0 = Date.now();
  const job = {
    runsOn: ['bench'],
    steps: [{ run: 'true' }],
    ...(jobImage ? { container: { image: jobImage } } : {}),
  };
  const res = await fetch(`${orch.url}/api/v1/runs`, {
    method: 'POST',
    headers: { authorization: `Bearer ${orch.adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify({ jobs: { cold: job } }),
  });
  const id = ((await res.json()) as { jobs: { id: string }[] }).jobs[0]!.id;
  let ms: number;
  for (;;) {
    const step = await orch.store.db
      .selectFrom('step_results')
      .select('started_at')
      .where('job_id', '=', id)
      .executeTakeFirst();
    const j = await orch.store.jobs.get(id);
    if (step && j && ['succeeded', 'failed'].includes(j.state)) {
      ms = step.started_at.getTime() - wall0;
      break;
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  // Cold means the last agent is gone from the engine too, as the raw start removes its own
  // container before the next one; a removal still running would slow the next create.
  while (
    orch.scaler!.entries().length ||
    (await docker.listContainers({ all: true, filters: { label: ['kici-scaler-name=bench-ct'] } })).length
  )
    await new Promise((r) => setTimeout(r, 5));
  return ms;
}

/**
 * Raw and ours alternate, one of each per round, so both see the same machine: a load change
 * half-way through a run moves both figures, not the ratio.
 */
async function pairedStarts(
  docker: Docker,
  socket: string,
  agentImage: string,
  n: number,
  jobImage?: string,
  runtime?: Runtime,
): Promise<{ ours: number[]; raw: number[] }> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-bench-ct-'));
  const cfg = join(dir, 'scalers.yaml');
  await writeFile(
    cfg,
    JSON.stringify({
      version: 1,
      scalers: [
        {
          name: 'bench-ct',
          type: 'container',
          maxAgents: 1,
          socketPath: socket,
          labelSets: [{ labels: ['bench'], image: agentImage, imagePullPolicy: 'Never' }],
        },
      ],
    }),
  );
  const orch = await Orchestrator.start({
    host: '0.0.0.0',
    port: 0,
    dataDir: dir,
    scalerConfigPath: cfg,
    logger: pino({ level: 'silent' }),
  });
  const wss = new WebSocketServer({ host: '0.0.0.0', port: 0 });
  await new Promise((r) => wss.once('listening', r));
  const ours: number[] = [];
  const raw: number[] = [];
  try {
    for (let i = 0; i < n; i++) {
      // Which goes first alternates too, so neither always follows the other's teardown.
      if (i % 2) raw.push(await rawStart(docker, wss, jobImage ?? agentImage, i, runtime));
      ours.push(await ourStart(orch, docker, jobImage));
      if (!(i % 2)) raw.push(await rawStart(docker, wss, jobImage ?? agentImage, i, runtime));
    }
  } finally {
    wss.close();
    await orch.stop();
    await rm(dir, { recursive: true, force: true });
  }
  return { ours, raw };
}

function result(name: string, ours: number[], raw: number[], engine: string): BenchResult {
  const ratio = median(ours) / median(raw);
  return {
    name: `${name} on ${engine}: submit → first step`,
    value: median(ours),
    unit: 'ms',
    ratio,
    target: 'ratio ≤ 1.3',
    pass: ratio <= 1.3,
    detail: `ours median ${fmt(median(ours))} ms (p95 ${fmt(percentile(ours, 95))}), raw container start+connect median ${fmt(median(raw))} ms (p95 ${fmt(percentile(raw, 95))}), n=${ours.length}`,
  };
}

export async function benchContainerStart(n = 20): Promise<BenchResult[]> {
  const host = process.env.DOCKER_HOST;
  if (!host?.startsWith('unix://'))
    return skipped(
      'set DOCKER_HOST=unix://<engine socket> and KICI_BENCH_ENGINE (see bench/container-start.ts)',
    );
  const socket = host.slice('unix://'.length);
  const engine = process.env.KICI_BENCH_ENGINE ?? (socket.includes('podman') ? 'podman' : 'docker');
  const agentImage = process.env.KICI_TEST_AGENT_IMAGE || `kici-agent:${packageVersion()}`;
  const jobImage = process.env.KICI_TEST_BUSYBOX_IMAGE || 'kici-test/busybox:1';
  const docker = new Docker({ socketPath: socket });
  try {
    await docker.ping();
    await docker.getImage(agentImage).inspect();
  } catch (err) {
    return skipped(
      `engine at ${socket} or image ${agentImage} not available (${(err as Error).message}); run npm run image:agent`,
    );
  }
  await ensureIsolatedNetwork(docker);
  await ensureRawNetwork(docker);
  const runtime = await ensureRuntimeVolume(docker, agentImage, (msg) => process.stderr.write(`${msg}\n`));
  // One unmeasured round each: the first start after an image load or volume fill is not cold-start.
  await pairedStarts(docker, socket, agentImage, 1);
  const plain = await pairedStarts(docker, socket, agentImage, n);
  const withImage = await pairedStarts(docker, socket, agentImage, n, jobImage, runtime);
  return [
    result('cold container job', plain.ours, plain.raw, engine),
    result('cold job-image job', withImage.ours, withImage.raw, engine),
  ];
}
