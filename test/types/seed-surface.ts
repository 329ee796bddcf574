/**
 * The seed's declared surface, checked by the compiler only (never run). Every name the seed
 * declares is imported through the package's own `exports` (the built `dist/index.d.ts`), then
 * assigned, called and awaited exactly the way the declaration says. A change of a public call
 * shape makes `npm run test:types` (and the unit test that runs it) fail, naming the line.
 *
 * Types the seed only references (its `types.js`, `@kici-dev/shared`) are not declared in it, so
 * their inputs here are literals of the shape the declarations document, or `declare const`.
 */
import {
  AGENT_CONTAINER_PIDS_LIMIT,
  buildAgentContainerHostConfig,
  ContainerScalerBackend,
  DEFAULT_MAX_CONCURRENT_SPAWNS,
  detectRuntime,
  EventScalerBackend,
  firecrackerNetworkSchema,
  ISOLATED_NETWORK_GATEWAY,
  ISOLATED_NETWORK_NAME,
  KICI_RUNTIME_DOCKER_LABEL,
  labelSetConfigSchema,
  loadScalerConfig,
  networkPolicySchema,
  parseMemoryString,
  runDiskGuard,
  scalerFileSchema,
  type AgentTokenStore,
  type ClaimedCredentials,
  type ContainerScalerBackendOptions,
  type DetectedRuntime,
  type DiskGuardResult,
  type EventScalerBackendOptions,
  type LabelSetConfig,
  type ManagedAgent,
  type ResourceRequest,
  type ScalerConfig,
  type ScalerEntry,
  type ScalerEventEmitterLike,
  type ScalerScaleDownPayload,
  type ScalerScaleUpPayload,
} from 'kici-orchestrator';

declare const entry: ScalerEntry;
declare const labelSets: LabelSetConfig[];
declare const tokenStore: AgentTokenStore;
declare const claimStore: EventScalerBackendOptions['claimStore'];
declare const scalerConfig: ScalerConfig;

// config.d.ts
const maxSpawns: 8 = DEFAULT_MAX_CONCURRENT_SPAWNS;
const policy: { allowlist?: string[]; denyAll: boolean; hostAccess?: string[] } | undefined =
  networkPolicySchema.parse({});
const labelSet: { labels: string[]; image?: string | undefined; overlayDriveSizeMib?: number | undefined } =
  labelSetConfigSchema.parse({ labels: ['linux'] });
const fcNet: { table: string; autoProvisionHost: boolean } = firecrackerNetworkSchema.parse({});
const file: { version: 1; globalMaxAgents: number } = scalerFileSchema.parse({ version: 1, scalers: [] });
const bytes: number = parseMemoryString('512m');
const loaded: Promise<ScalerConfig> = loadScalerConfig('/etc/kici/scalers.yaml');
const loadedWithDir: Promise<ScalerConfig> = loadScalerConfig(
  '/etc/kici/scalers.yaml',
  '/etc/kici/scalers.d',
);

// container-backend.d.ts
const networkName: 'kici-agent-net' = ISOLATED_NETWORK_NAME;
const gateway: '172.30.0.1' = ISOLATED_NETWORK_GATEWAY;
const detected: DetectedRuntime = { socketPath: '/var/run/docker.sock', runtime: 'podman' };
const detectedSocket: string = detected.socketPath;
const detectedKind: 'docker' | 'podman' = detected.runtime;
const defaultResources: ResourceRequest = { limits: { cpus: 1, memory: '1g' } };
const containerOptions: ContainerScalerBackendOptions = {
  entry,
  runtime: 'auto',
  defaultResources,
  extraHosts: ['registry.local:host-gateway'],
  networkIsolation: false,
  hostServices: ['10.0.0.5:9000'],
  tokenStore,
  tokenTtlMs: 3_600_000,
};
const runtimes: Array<ContainerScalerBackendOptions['runtime']> = ['docker', 'podman', 'auto', undefined];

async function containerBackendShapes(): Promise<void> {
  const tools: unknown[] = ContainerScalerBackend.getRequiredTools(entry);
  const backend: ContainerScalerBackend = await ContainerScalerBackend.create(containerOptions);
  const signal: AbortSignal = new AbortController().signal;
  const agent: ManagedAgent = await backend.spawn(
    ['linux', 'x64'],
    'agent-1',
    'http://127.0.0.1:4000',
    () => undefined,
    { cpus: 2, memBytes: 2 * 1024 ** 3 },
    undefined,
    signal,
  );
  const shortSpawn: Promise<ManagedAgent> = backend.spawn(['linux'], 'agent-2', 'http://127.0.0.1:4000');
  const id: string = agent.id;
  const agentLabels: string[] = agent.labelSet;
  const ref: string = agent.backendRef;
  const spawnedAt: number = agent.spawnedAt;
  const state: 'spawning' | 'running' | 'destroying' = agent.state;
  const context: Record<string, unknown> | undefined = backend.getScalerContext('agent-1');
  const destroyed: Promise<void> = backend.destroy('agent-1');
  await backend.destroy('agent-2', undefined);
  const capture = backend.getLogCapture('agent-1');
  if (capture) {
    for await (const line of capture.lines()) {
      const text: string = line;
      void text;
    }
    const tail: string = capture.tail();
    capture.close();
    void tail;
  }
  const shutdown: Promise<void> = backend.shutdownAll();
  backend.reload(labelSets);
  backend.reload(labelSets, { maxAgents: 4 });
  const reaped: boolean = await backend.reapUnowned('agent-3');
  void [tools, shortSpawn, id, agentLabels, ref, spawnedAt, state, context, destroyed, shutdown, reaped];
}

// container-hostconfig.d.ts
const pidsLimit: 4096 = AGENT_CONTAINER_PIDS_LIMIT;
const hostConfig = buildAgentContainerHostConfig({
  limits: { cpus: 1, memBytes: 1024 ** 3 },
  binds: ['/cache:/cache:ro'],
  extraHosts: ['registry.local:host-gateway'],
});
const hostPids: number | undefined = hostConfig.PidsLimit;

// container-routing.d.ts
const dockerLabel: 'kici:runtime:docker' = KICI_RUNTIME_DOCKER_LABEL;

// disk-guard.d.ts
async function diskGuardShapes(): Promise<void> {
  const result: DiskGuardResult = await runDiskGuard({
    scalerConfig,
    thresholdBytes: 1024 ** 3,
    statfsFn: async () => ({ bavail: 10, bsize: 4096 }),
    reapFn: async (cfg: ScalerConfig) => {
      void cfg;
      return { reaped: 0 };
    },
  });
  const reaped: boolean = result.reaped;
  const recovered: boolean = result.recovered;
  const free: number = result.freeBytesAfter;
  void [reaped, recovered, free];
}

// event-backend.d.ts
const emitter: ScalerEventEmitterLike = {
  emitScalerScaleUp: async (payload: ScalerScaleUpPayload, targets: string[]) => {
    void [payload, targets];
    return 'event-1';
  },
  emitScalerScaleDown: async (payload: ScalerScaleDownPayload, targets: string[]) => {
    void [payload, targets];
    return 'event-2';
  },
};
const eventOptions: EventScalerBackendOptions = { entry, emitter, claimStore, requestId: () => 'req-1' };

async function eventBackendShapes(): Promise<void> {
  const backend = new EventScalerBackend(eventOptions);
  const current: ScalerEntry = backend.currentEntry;
  const active: number = backend.getActiveCount();
  const agent: ManagedAgent = await backend.spawn(
    ['linux'],
    'agent-1',
    'https://ci.example.com',
    () => undefined,
    { cpus: 0, memBytes: 0 },
    undefined,
    new AbortController().signal,
  );
  await backend.destroy(agent.id);
  await backend.destroy(agent.id, undefined);
  const forgot: void = backend.forget('agent-1');
  backend.adopt('agent-2', ['linux']);
  const marked: void = backend.markActive('agent-2');
  const credentials: ClaimedCredentials = await backend.claim('code');
  const shutdown: Promise<void> = backend.shutdownAll();
  backend.reload(labelSets);
  void [current, active, forgot, marked, credentials, shutdown];
}

// the runtime probe, from the main entry
async function detectShapes(): Promise<void> {
  const any: DetectedRuntime | null = await detectRuntime();
  const auto: DetectedRuntime | null = await detectRuntime('auto');
  const docker: DetectedRuntime | null = await detectRuntime('docker');
  void [any, auto, docker];
}

export const checked = [
  maxSpawns,
  policy,
  labelSet,
  fcNet,
  file,
  bytes,
  loaded,
  loadedWithDir,
  networkName,
  gateway,
  detectedSocket,
  detectedKind,
  runtimes,
  containerBackendShapes,
  pidsLimit,
  hostPids,
  dockerLabel,
  diskGuardShapes,
  eventBackendShapes,
  detectShapes,
];
