import { dirname } from 'node:path';
import type { ScalerEntry } from '../../../config/index.js';
import type { BackendDescriptor } from '../descriptor.js';
import type { BackendDeps } from '../deps.js';
import { UserError } from '../../../util/errors.js';
import { BareMetalScalerBackend } from './backend.js';
import { AgentSpawner } from './spawner/agent-spawner.js';
import { CgroupfsLimits } from './agent-limits.js';
import { chooseAgentLimits, hostLimitsProbes } from './choose-limits.js';
import { agentsCannotRun, planConfinement } from './confinement-plan.js';
import { probeHostFacts } from './host-probe.js';
import { bareMetalTools } from './tools.js';
import { checkJobImageHost, isJobImageSet, JobImageAgents } from './job-image.js';
import { AGENT_UID_COUNT, AGENT_UID_FIRST, AgentUserPool, defaultHomesRoot } from './users.js';

/** How the registry builds a bare-metal scaler. */
export const bareMetalDescriptor: BackendDescriptor = {
  type: 'bare-metal',
  requiredTools: (entry, deps) => bareMetalTools(entry, dirname(deps.configPath), deps.hostEnv),
  usesEngine: (entry) => entry.labelSets.some(isJobImageSet),
  hostProblems: (entry, deps) => [
    // The same confinement choice create() makes: a set the host cannot confine is refused there.
    ...planConfinement(entry, probeHostFacts(deps.hostEnv ?? process.env), deps.hostEnv ?? process.env)
      .problems,
    ...(process.getuid?.() === 0
      ? []
      : entry.labelSets.flatMap((ls, i) =>
          ls.runAsUser === 'dynamic'
            ? [
                [
                  `labelSets[${i}].runAsUser`,
                  `scaler "${entry.name}": runAsUser: dynamic needs the orchestrator to run as root (it switches each agent to its own uid)`,
                  'run the orchestrator as root, or remove runAsUser',
                ] as [string, string, string],
              ]
            : [],
        )),
  ],
  async hostWarnings(entry, deps) {
    const limits = await chooseAgentLimits(entry.enforceCgroups === true, {
      ...hostLimitsProbes(deps.hostEnv ?? process.env),
      ...deps.limitsProbes,
    });
    return limits.advisory
      ? [['enforceCgroups', `scaler "${entry.name}": ${limits.advisory.problem}`, limits.advisory.fix]]
      : [];
  },
  async create(entry, deps) {
    // Chosen once from what this host allows: root's cgroup tree, else the user's service manager,
    // else none (one warning, and the diagnose and validate rows say so).
    const limits =
      entry.enforceCgroups && deps.cgroups
        ? new CgroupfsLimits(deps.cgroups)
        : await chooseAgentLimits(entry.enforceCgroups === true, {
            ...hostLimitsProbes(deps.hostEnv ?? process.env),
            ...deps.limitsProbes,
          });
    // A job must not act as the operator: each set gets the confinement this host allows, or the
    // scaler is refused before any spawn, naming the fix.
    const hostFacts = deps.hostFacts ?? probeHostFacts(deps.hostEnv ?? process.env);
    const plan = planConfinement(entry, hostFacts, deps.hostEnv ?? process.env);
    if (plan.errors.length) throw new UserError(plan.errors.join('\n'));
    const unreachable = agentsCannotRun(entry, plan, dirname(deps.configPath), deps.hostEnv ?? process.env);
    if (unreachable.length) throw new UserError(unreachable.join('\n'));
    const jobImage = entry.labelSets.some(isJobImageSet) ? await jobImageAgents(entry, deps) : undefined;
    // Started now, while it can: its first fork is the only one that copies the orchestrator.
    const spawner = new AgentSpawner(
      (why) =>
        deps.logger.warn(
          { scaler: entry.name },
          `agent spawner ${why}; agents are started by the orchestrator itself until it is started again`,
        ),
      {
        onReady: (restarted) =>
          restarted && deps.logger.info({ scaler: entry.name }, 'agent spawner started again'),
      },
    );
    spawner.start();
    return new BareMetalScalerBackend({
      entry,
      spawner,
      jobImage,
      limits,
      logger: deps.logger,
      // The host-wide pool the backend would make itself, telling this log what it leaves behind.
      users: new AgentUserPool(defaultHomesRoot(), AGENT_UID_FIRST, AGENT_UID_COUNT, (msg, context) =>
        deps.logger.warn({ scaler: entry.name, ...context }, msg),
      ),
      baseDir: dirname(deps.configPath),
      ...(deps.hostEnv ? { hostEnv: deps.hostEnv } : {}),
      ...(deps.dataDir ? { dataDir: deps.dataDir } : {}),
      hostFacts,
      secretFiles: deps.secretFiles ?? [],
    });
  },
};

/** The engine and firewall for job-image label sets, checked before the scaler exists. */
async function jobImageAgents(entry: ScalerEntry, deps: BackendDeps): Promise<JobImageAgents> {
  let docker = deps.docker;
  let engine = deps.engine;
  if (!docker) {
    if (!deps.connectEngine)
      throw new UserError(
        `scaler "${entry.name}": job-image label sets ${JobImageAgents.describe(entry)} need a container runtime and none was provided; install Docker or Podman, or set socketPath`,
      );
    ({ docker, engine } = await deps.connectEngine(entry));
  }
  const jobDeps = {
    docker,
    socketPath: engine?.local === false ? undefined : engine?.socketPath,
    isolation: deps.isolation,
    hostServices: deps.hostServices,
  };
  await checkJobImageHost(entry, jobDeps);
  return new JobImageAgents(
    entry.name,
    jobDeps,
    deps.logger.child({ component: 'bare-metal-job-image', scaler: entry.name }),
    deps.hostEnv ?? process.env,
    () => entry.extraHosts,
  );
}
