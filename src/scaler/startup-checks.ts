/**
 * Every check start-up runs on a scaler config, as one list with two callers: `kici-admin scaler
 * validate` runs it offline and `serve` runs it before it builds anything. So serve never stops on a
 * problem validate passed, and both word each problem the same way: the file, the YAML path, the
 * problem and the fix.
 */
import { loadScalerConfigForPeople, type ScalerConfig, type ScalerEntry } from '../config/index.js';
import { NFT_REMEDY } from '../net/nft-isolation.js';
import { nftRequiredTool } from '../net/nft-preflight.js';
import { createNftRunner } from '../net/nft-runner.js';
import { errorMessage } from '../util/errors.js';
import { hostToolEnv } from '../util/host-tool-env.js';
import { resolveTool } from '../util/system-tools.js';
import { connectEngine } from './backends/engine-client.js';
import {
  descriptorFor,
  entryHostProblems,
  preflightEntry,
  usesContainerEngine,
} from './backends/registry.js';
import { preflightTools } from './preflight.js';
import { jobTargetProblems } from './events/job-targets.js';
import { WEBHOOK_SECRET_ENV } from './events/router.js';
import {
  describeFinding,
  fileOf,
  type CheckFinding,
  type Finder,
  type StartupCheckOptions,
} from './startup-finding.js';
import { bridgeFindings, diskGuardFindings, ledgerFindings } from './startup-shared-findings.js';

/** How long an engine may take to answer a ping before it counts as away. */
const ENGINE_PING_TIMEOUT_MS = 5_000;

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
    // The probe is an nft run like any other: it gets none of the orchestrator's credentials either.
    await createNftRunner({ sudo, command: resolveTool('nft', env), env: hostToolEnv(env) }).list(['tables']);
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
