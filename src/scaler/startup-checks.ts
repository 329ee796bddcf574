/**
 * Every check start-up runs on a scaler config, as one list with two callers: `kici-admin scaler
 * validate` runs it offline and `serve` runs it before it builds anything. So serve never stops on a
 * problem validate passed, and both word each problem the same way: the file, the YAML path, the
 * problem and the fix.
 */
import { statfs as fsStatfs } from 'node:fs/promises';
import {
  DEFAULT_JAILER_CHROOT_BASE_DIR,
  loadScalerConfigForPeople,
  type ScalerConfig,
  type ScalerEntry,
} from '../config/index.js';
import { NFT_REMEDY } from '../net/nft-isolation.js';
import { nftRequiredTool } from '../net/nft-preflight.js';
import { createNftRunner } from '../net/nft-runner.js';
import { errorMessage } from '../util/errors.js';
import { resolveTool } from '../util/system-tools.js';
import { connectEngine } from './backends/engine-client.js';
import {
  DEFAULT_DISK_GUARD_THRESHOLD_BYTES,
  descriptorFor,
  entryHostProblems,
  freeBytes,
  preflightEntry,
  usesContainerEngine,
  vmBridgeExists,
  type StatfsFn,
} from './backends/registry.js';
import { preflightTools } from './preflight.js';
import type { BackendDeps } from './backends/deps.js';
import { jobTargetProblems } from './events/job-targets.js';
import { WEBHOOK_SECRET_ENV } from './events/router.js';
import { resolveLedgerDir } from './ledger/ledger-dir.js';

export interface CheckFinding {
  severity: 'error' | 'warning';
  file: string;
  /** Where in the YAML: `scalers[2].labelSets[0].binaryPath`. */
  path: string;
  problem: string;
  fix: string;
}

export function describeFinding(f: CheckFinding): string {
  return `${f.file}: ${f.path}: ${f.problem}. Fix: ${f.fix}`;
}

/** How long an engine may take to answer a ping before it counts as away. */
const ENGINE_PING_TIMEOUT_MS = 5_000;

export interface StartupCheckOptions {
  configPath: string;
  /** The file each `scalers[i]` came from (drop-ins); the main file when absent. */
  scalerFiles?: readonly string[];
  /** The environment the orchestrator (and its tools) runs with. */
  env?: NodeJS.ProcessEnv;
  /**
   * `validate`: an engine that does not answer is a warning (it may be started before serve);
   * `serve`: it is an error, since the container backend cannot be built without it.
   */
  mode: 'validate' | 'serve';
  /** Ping a scaler's engine; the default connects as the backend does. */
  pingEngine?: (entry: ScalerEntry) => Promise<void>;
  /** Prove nft works (`nft list tables`); the default runs it. `false`: the firewall is injected. */
  probeNft?: ((sudo: boolean) => Promise<void>) | false;
  statfs?: StatfsFn;
  diskThresholdBytes?: number;
  /** What the bare-metal limits chooser asks of the host; probed when absent. */
  limitsProbes?: BackendDeps['limitsProbes'];
}

type Finder = (entry: ScalerEntry, i: number, o: StartupCheckOptions) => Promise<CheckFinding[]>;

function fileOf(o: StartupCheckOptions, i: number): string {
  return o.scalerFiles?.[i] ?? o.configPath;
}

const toolFindings: Finder = async (entry, i, o) => {
  const problems = await preflightEntry(entry, { configPath: o.configPath, hostEnv: o.env ?? process.env });
  return problems.map((p) => ({
    severity: p.severity === 'fatal' ? 'error' : 'warning',
    file: fileOf(o, i),
    path: `scalers[${i}]${p.field ? `.${p.field}` : ''}`,
    problem: `scaler "${entry.name}": ${p.tool}: ${p.problem}`,
    fix: p.fix,
  }));
};

function defaultNftProbe(env: NodeJS.ProcessEnv): (sudo: boolean) => Promise<void> {
  return async (sudo) => {
    await createNftRunner({ sudo, command: resolveTool('nft', env) }).list(['tables']);
  };
}

/** nft must not only be installed but work for this user (CAP_NET_ADMIN, or sudo -n). */
function nftFinder(): Finder {
  const probed = new Map<boolean, Promise<string | undefined>>();
  return async (entry, i, o) => {
    if (o.probeNft === false) return [];
    const nft = nftRequiredTool();
    const needs = descriptorFor(entry)
      .requiredTools(entry, { configPath: o.configPath, hostEnv: o.env ?? process.env })
      .some((t) => t.name === nft.name);
    // A missing nft is already a tool finding; probing it would only repeat that.
    if (!needs || (await preflightTools(entry, [nft], o.env ?? process.env)).length) return [];
    const sudo = entry.requireSudo === true;
    const probe = o.probeNft ?? defaultNftProbe(o.env ?? process.env);
    let result = probed.get(sudo);
    if (!result) {
      result = probe(sudo).then(
        () => undefined,
        (err: unknown) => errorMessage(err),
      );
      probed.set(sudo, result);
    }
    const failure = await result;
    if (failure === undefined) return [];
    return [
      {
        severity: 'error',
        file: fileOf(o, i),
        path: `scalers[${i}]${entry.type === 'container' ? '.networkIsolation' : ''}`,
        problem: `scaler "${entry.name}": nft does not work here (${failure.split('\n')[0]})`,
        fix:
          entry.type === 'container'
            ? `${NFT_REMEDY}, or set networkIsolation: false in this scaler`
            : NFT_REMEDY,
      },
    ];
  };
}

const entryFindings: Finder = async (entry, i, o) =>
  entryHostProblems(entry, { configPath: fileOf(o, i), hostEnv: o.env ?? process.env }).map(
    ([field, problem, fix]) => ({
      severity: 'error',
      file: fileOf(o, i),
      path: `scalers[${i}].${field}`,
      problem,
      fix,
    }),
  );

/**
 * What a backend will do here without stopping (limits that stay advisory): `validate` lists it; at
 * start-up the backend says it once itself, so serve does not repeat it.
 */
const warningFindings: Finder = async (entry, i, o) => {
  if (o.mode !== 'validate') return [];
  const found = await descriptorFor(entry).hostWarnings?.(entry, {
    configPath: fileOf(o, i),
    hostEnv: o.env ?? process.env,
    ...(o.limitsProbes ? { limitsProbes: o.limitsProbes } : {}),
  });
  return (found ?? []).map(([field, problem, fix]) => ({
    severity: 'warning',
    file: fileOf(o, i),
    path: `scalers[${i}].${field}`,
    problem,
    fix,
  }));
};

/** Webhooks are never sent unsigned, so a webhook target without the signing secret cannot work. */
const webhookFindings: Finder = async (entry, i, o) => {
  if ((o.env ?? process.env)[WEBHOOK_SECRET_ENV]) return [];
  return (entry.provisioningTargets ?? []).flatMap((t, j) =>
    t.startsWith('webhook:')
      ? [
          {
            severity: 'error' as const,
            file: fileOf(o, i),
            path: `scalers[${i}].provisioningTargets[${j}]`,
            problem: `scaler "${entry.name}": a webhook target is signed with ${WEBHOOK_SECRET_ENV}, but ${WEBHOOK_SECRET_ENV} is not set`,
            fix: `set ${WEBHOOK_SECRET_ENV} in the orchestrator's environment to the secret the receiver verifies signatures with`,
          },
        ]
      : [],
  );
};

async function defaultPing(entry: ScalerEntry, env: NodeJS.ProcessEnv): Promise<void> {
  const { docker } = await connectEngine(entry, env);
  await docker.ping();
}

const engineFindings: Finder = async (entry, i, o) => {
  if (!usesContainerEngine(entry)) return [];
  const ping = o.pingEngine ?? ((e: ScalerEntry) => defaultPing(e, o.env ?? process.env));
  let timer: NodeJS.Timeout | undefined;
  const failure = await Promise.race([
    ping(entry).then(() => undefined),
    new Promise<string>((resolve) => {
      timer = setTimeout(
        () => resolve(`no answer within ${ENGINE_PING_TIMEOUT_MS / 1000}s`),
        ENGINE_PING_TIMEOUT_MS,
      );
    }),
  ])
    .catch((err: unknown) => errorMessage(err))
    .finally(() => clearTimeout(timer));
  if (failure === undefined) return [];
  const field = entry.socketPath ? '.socketPath' : entry.host ? '.host' : '';
  const where = entry.socketPath ?? entry.host ?? 'the detected socket';
  return [
    {
      severity: o.mode === 'serve' ? 'error' : 'warning',
      file: fileOf(o, i),
      path: `scalers[${i}]${field}`,
      problem: `scaler "${entry.name}": the container engine at ${where} does not answer (${failure.split('\n')[0]})`,
      fix: 'start Docker or Podman, or fix socketPath/host',
    },
  ];
};

/** The bridge is needed at once when the orchestrator may not create it. */
const bridgeFindings = async (config: ScalerConfig, o: StartupCheckOptions): Promise<CheckFinding[]> => {
  const i = config.scalers.findIndex((s) => s.type === 'firecracker');
  const net = config.firecracker;
  if (i < 0 || !net || net.autoProvisionHost) return [];
  const entry = config.scalers[i]!;
  const env = o.env ?? process.env;
  if (!resolveTool('ip', env).includes('/')) return [];
  if (await vmBridgeExists(net.bridgeName, entry.requireSudo === true, env)) return [];
  return [
    {
      severity: 'error',
      file: o.configPath,
      path: 'firecracker.bridgeName',
      problem: `bridge ${net.bridgeName} does not exist`,
      fix: 'create it, or set firecracker.autoProvisionHost: true',
    },
  ];
};

/** Start-up measures free space under the first VM scaler's chrootBaseDir before anything else. */
const diskGuardFindings = async (config: ScalerConfig, o: StartupCheckOptions): Promise<CheckFinding[]> => {
  const i = config.scalers.findIndex((s) => s.type === 'firecracker');
  if (i < 0) return [];
  const entry = config.scalers[i]!;
  const volume = entry.chrootBaseDir || DEFAULT_JAILER_CHROOT_BASE_DIR;
  const at = { file: fileOf(o, i), path: `scalers[${i}].chrootBaseDir` };
  let free: number;
  try {
    free = await freeBytes(o.statfs ?? fsStatfs, volume);
  } catch (err) {
    const missing = (err as NodeJS.ErrnoException).code === 'ENOENT';
    return [
      {
        severity: 'error',
        ...at,
        problem: missing
          ? `scaler "${entry.name}": ${volume} does not exist (VM files and the disk guard live there)`
          : `scaler "${entry.name}": ${volume} cannot be measured (${errorMessage(err)})`,
        fix: `create it (mkdir -p ${volume}) on the volume meant for VM files, or point chrootBaseDir at such a directory`,
      },
    ];
  }
  const threshold = o.diskThresholdBytes ?? DEFAULT_DISK_GUARD_THRESHOLD_BYTES;
  if (free >= threshold) return [];
  return [
    {
      severity: 'warning',
      ...at,
      problem: `scaler "${entry.name}": ${free} bytes free under ${volume}, below ${threshold}; start-up reaps stale VM artifacts and refuses to start if still short`,
      fix: `free space under ${volume}`,
    },
  ];
};

/** An operator-chosen ledger directory must be writable; the fallbacks are tried in turn at start-up. */
const ledgerFindings = async (config: ScalerConfig, o: StartupCheckOptions): Promise<CheckFinding[]> => {
  const dir = (o.env ?? process.env).KICI_MACHINE_LEDGER_DIR;
  if (!config.machinePools?.length || !dir) return [];
  return resolveLedgerDir({ explicitDir: dir }).then(
    () => [],
    (err: unknown) => [
      {
        severity: 'error' as const,
        file: o.configPath,
        path: 'machinePools',
        problem: errorMessage(err),
        fix: 'make KICI_MACHINE_LEDGER_DIR a directory the orchestrator can write, or unset it',
      },
    ],
  );
};

/** Every host check on a loaded config, in config order; nothing is thrown for a host problem. */
export async function startupFindings(config: ScalerConfig, o: StartupCheckOptions): Promise<CheckFinding[]> {
  const perScaler: Finder[] = [
    toolFindings,
    entryFindings,
    warningFindings,
    webhookFindings,
    nftFinder(),
    engineFindings,
  ];
  const findings: CheckFinding[] = [];
  for (const [i, entry] of config.scalers.entries())
    for (const find of perScaler) findings.push(...(await find(entry, i, o)));
  findings.push(...(await diskGuardFindings(config, o)));
  findings.push(...(await bridgeFindings(config, o)));
  findings.push(...(await ledgerFindings(config, o)));
  return findings;
}

/** `warnings` are the config's own; `hostWarnings` come from the host checks. */
export type ConfigCheckResult =
  | { ok: true; config: ScalerConfig; warnings: string[]; hostWarnings: string[] }
  | { ok: false; config?: ScalerConfig; problems: string[]; warnings: string[]; hostWarnings: string[] };

/**
 * Load, then check templates and the host: every problem at once. `problems` are errors (start-up
 * refuses), `warnings` are not.
 */
export async function checkScalerConfig(
  configPath: string,
  dir: string | undefined,
  o: Omit<StartupCheckOptions, 'configPath' | 'scalerFiles'> & { host?: boolean },
): Promise<ConfigCheckResult> {
  const loaded = await loadScalerConfigForPeople(configPath, dir);
  if (!loaded.ok) return { ok: false, problems: loaded.problems, warnings: [], hostWarnings: [] };
  const templates = await jobTargetProblems(loaded.config, configPath);
  const findings =
    o.host === false
      ? []
      : await startupFindings(loaded.config, {
          ...o,
          configPath,
          ...(loaded.scalerFiles ? { scalerFiles: loaded.scalerFiles } : {}),
        });
  const problems = [
    ...templates.map((t) => `${configPath}: ${t}`),
    ...findings.filter((f) => f.severity === 'error').map(describeFinding),
  ];
  const hostWarnings = findings.filter((f) => f.severity === 'warning').map(describeFinding);
  const warnings = loaded.warnings;
  return problems.length
    ? { ok: false, config: loaded.config, problems, warnings, hostWarnings }
    : { ok: true, config: loaded.config, warnings, hostWarnings };
}
