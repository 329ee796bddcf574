/**
 * One container spawn, in order: pull, create, start, address, firewall rules. The container id
 * becomes the backendRef as soon as it exists; after every await the spawn checks it is still
 * wanted (a destroy or the deadline may have come), and the failure path removes whatever was
 * created with a fresh, unsignalled request.
 */
import type Docker from 'dockerode';
import { parseMemoryString, type LabelSetConfig } from '../../../config/index.js';
import {
  ImageAuthError,
  resolveImageAuth,
  type ImageAuthSpec,
  type RegistryAuth,
} from '../../../jobs/image-auth.js';
import { SpawnError } from '../../core/spawn-errors.js';
import { errorMessage } from '../../../util/errors.js';
import { agentLineForJob } from '../../../util/agent-output.js';
import type { EffectiveLimits, SpawnContext } from '../../types.js';
import { buildAgentHostConfig } from '../agent-container-host.js';
import { classifyEngineError, statusOf } from './engine-errors.js';
import { ensureRuntimeVolume, forgetRuntimeVolume, RUNTIME_MOUNT } from './job-image.js';
import { containerEnv, containerLabels } from './labels.js';
import { fetchTail, followLogs, LineTail } from './logs.js';
import { containerAddress, ISOLATED_NETWORK_NAME } from './network.js';
import { ensureImage } from './pull.js';
import { handTokenOver } from './token-handoff.js';
import type { SpawnHost, Tracked } from './tracked.js';

export class Superseded extends Error {}

async function resolvePullAuth(spec: ImageAuthSpec, image: string): Promise<RegistryAuth> {
  try {
    return await resolveImageAuth(spec, image);
  } catch (err) {
    if (!(err instanceof ImageAuthError)) throw err;
    throw new SpawnError('image-pull', err.message, { deterministic: true, retryable: false });
  }
}

function limitsFor(
  req: SpawnContext,
  ls: LabelSetConfig,
  defaults: EffectiveLimits | undefined,
): EffectiveLimits | undefined {
  if (req.limits && (req.limits.cpus > 0 || req.limits.memBytes > 0)) return req.limits;
  const l = ls.resources?.limits;
  if (!l) return defaults;
  return { cpus: l.cpus ?? 0, memBytes: l.memory ? parseMemoryString(l.memory) : 0 };
}

export async function runSpawn(
  host: SpawnHost,
  req: SpawnContext,
  ls: LabelSetConfig,
  t: Tracked,
): Promise<void> {
  const { docker } = host;
  const alive = () => {
    if (host.current(req.agentId) !== t || t.destroying)
      throw new Superseded('torn down while its container was being provisioned');
    if (req.signal.aborted) throw new Superseded('spawn aborted (deadline or shutdown)');
  };
  const jobImage = req.image !== undefined;
  const image = req.image ?? ls.image!;
  const where = host.engineWhere;
  const engine = <T>(what: string, p: Promise<T>) =>
    p.catch((err: unknown) => Promise.reject(classifyEngineError(err, where, what)));

  const policy = jobImage ? 'IfNotPresent' : ls.imagePullPolicy;
  // Read from the secret store when a pull is due (a rotated token applies to the next pull) and
  // handed only to the engine; a missing secret is the operator's to fix, so it fails the spawn.
  const imageAuth = jobImage ? req.imageAuth : undefined;
  const makeAvailable = () =>
    engine(
      `making image ${image} available`,
      ensureImage(docker, image, policy, {
        onProgress: (d) => req.onEvent('scaler.provisioning', d),
        signal: req.signal,
        resolveAuth: imageAuth ? () => resolvePullAuth(imageAuth, image) : undefined,
      }),
    );
  // Before the create, under every policy: a missing image is pulled (or refused under Never) while
  // the spawn's signal can still cut the pull short, at the cost of one inspect per warm spawn.
  await makeAvailable();
  alive();
  if (jobImage) t.runtimeOf = ls.image!;
  const runtime = jobImage
    ? await engine(
        'preparing the agent runtime volume',
        ensureRuntimeVolume(docker, ls.image!, (msg) => host.warn(req.agentId, msg)),
      )
    : undefined;
  alive();
  const isolated = host.isolation !== undefined;
  const env = containerEnv({
    orchestratorUrl: host.agentUrl(req.orchestratorUrl),
    agentId: req.agentId,
    fullLabels: req.fullLabels,
    labelSet: ls,
    hostEnv: host.hostEnv,
    jobImage,
  });
  const hostConfig = buildAgentHostConfig({
    limits: limitsFor(req, ls, host.defaultLimits),
    volumes: ls.volumes,
    extraHosts: host.extraHosts(),
    engineSocket: host.localSocket,
    containerSocket: ls.containerSocket,
    extraBinds: runtime ? [`${runtime.volume}:${RUNTIME_MOUNT}:ro`] : undefined,
    networkMode: isolated ? ISOLATED_NETWORK_NAME : undefined,
  });
  req.onEvent('scaler.provisioning', 'creating container');
  const spec: Docker.ContainerCreateOptions = {
    Image: image,
    Env: env,
    ...(runtime ? { Entrypoint: runtime.cmd, Cmd: [] } : {}),
    Labels: containerLabels({
      scalerName: host.name,
      agentId: req.agentId,
      labelSet: ls.labels,
      boundJobId: req.boundJobId,
      runId: req.runId,
    }),
    HostConfig: hostConfig,
    ...(isolated ? { NetworkingConfig: { EndpointsConfig: { [ISOLATED_NETWORK_NAME]: {} } } } : {}),
  };
  let created: Docker.Container;
  try {
    created = await docker.createContainer(spec);
  } catch (err) {
    if (policy === 'Always' || statusOf(err) !== 404 || !/image/i.test(errorMessage(err)))
      throw classifyEngineError(err, where, 'creating the agent container');
    // The image went away between the check and the create (a prune): make it available again.
    await makeAvailable();
    alive();
    created = await engine('creating the agent container', docker.createContainer(spec));
  }
  t.containerId = created.id;
  t.agent.backendRef = created.id;
  alive();
  if (req.auth.kind === 'token')
    await engine('handing the agent its token', handTokenOver(created, req.auth.token));
  alive();
  if (isolated)
    req.onEvent(
      'scaler.network',
      `joining ${ISOLATED_NETWORK_NAME}; the agent is refused everywhere until its firewall rules apply`,
    );
  await engine('starting the agent container', created.start());
  req.onEvent('scaler.ready', 'container started');
  // Attached while the address is read and the rules applied (it is only output, so it may lag).
  const attaching = followLogs(
    docker,
    created.id,
    (stream, line) => {
      host.onOutput(req.agentId, stream, line);
      req.onEvent('agent.output', agentLineForJob(stream, line));
    },
    t.tail,
  ).then(
    (logs) => {
      // A failure path that already ran finds no handle to close, so the late one closes itself.
      if (t.failed) logs.close();
      else t.logs = logs;
    },
    (err: unknown) =>
      host.warn(req.agentId, `cannot follow the agent container's output: ${errorMessage(err)}`),
  );
  t.attaching = attaching;
  alive();
  if (isolated) {
    const ip = await engine(
      'reading the container address',
      containerAddress(docker, created.id, ISOLATED_NETWORK_NAME),
    );
    if (!ip)
      throw new SpawnError(
        'transient',
        `the container has no address on ${ISOLATED_NETWORK_NAME}; not starting an unconfined agent`,
      );
    t.ip = ip;
    // Until this lands the table refuses the agent's every packet (nft-rules.ts); its dial is
    // refused at once and retried, so it connects within a retry of the rules going in.
    await host.applyRules(req, ls, ip);
    alive();
  }
  await attaching;
  alive();
}

/** The failure path: report with the output tail, then leave nothing behind. */
export async function failSpawn(
  host: SpawnHost,
  req: SpawnContext,
  t: Tracked,
  err: unknown,
): Promise<SpawnError> {
  const failure =
    err instanceof Superseded
      ? new SpawnError('spawn-timeout', err.message, { cause: err })
      : classifyEngineError(err, host.engineWhere, 'spawning');
  let tail = t.tail.tail();
  if (tail.length === 0 && t.containerId)
    // The tail only adds detail to the failure, which is reported either way.
    tail = await fetchTail(host.docker, t.containerId).catch(() => [] as string[]);
  req.onEvent('scaler.failed', failure.message + (tail.length ? `\n---\n${tail.join('\n')}` : ''));
  t.failed = true;
  if (t.runtimeOf) forgetRuntimeVolume(host.docker, t.runtimeOf);
  await t.attaching;
  t.logs?.close();
  if (t.ip) await host.removeRules(t.ip);
  // A fresh request, never the spawn's own signal: that one may be what aborted. Already gone is
  // fine; any other failure leaves the container to cleanupOrphans, which the operator should know.
  if (t.containerId) {
    const id = t.containerId;
    await host.docker
      .getContainer(id)
      .remove({ force: true })
      .catch((err: unknown) => {
        if (statusOf(err) !== 404)
          host.warn(
            req.agentId,
            `could not remove failed agent container ${id.slice(0, 12)}: ${errorMessage(err)}; orphan cleanup reclaims it`,
          );
      });
  }
  return failure;
}

export { LineTail };

/** An agent container that exits before registering is a failed start: say why, with its output. */
export function watchExit(docker: Docker, req: SpawnContext, t: Tracked): void {
  void docker
    .getContainer(t.containerId!)
    .wait()
    .then(
      (r: { StatusCode?: number }) => {
        if (t.registered || t.destroying) return;
        if (t.runtimeOf) forgetRuntimeVolume(docker, t.runtimeOf);
        const tail = t.tail.tail(10).join('\n');
        req.onEvent(
          'scaler.failed',
          `agent container exited with code ${r.StatusCode ?? '?'} before it registered${tail ? `\n---\n${tail}` : ''}`,
        );
      },
      () => undefined,
    );
}
