/** What an agent container carries: engine labels (for orphan sweeps) and its environment. */
import { normalizeLabelSet, type LabelSetConfig } from '../../../config/index.js';
import { TOKEN_FILE } from './token-handoff.js';

export const LABEL_MANAGED = 'kici-managed';
export const LABEL_SCALER = 'kici-scaler-name';
export const LABEL_AGENT = 'kici-agent-id';
export const LABEL_LABELS = 'kici-labels';
export const LABEL_JOB = 'kici-bound-job-id';
export const LABEL_RUN = 'kici-run-id';

export interface ContainerIdentity {
  scalerName: string;
  agentId: string;
  labelSet: readonly string[];
  boundJobId?: string | undefined;
  runId?: string | undefined;
}

/**
 * The labels every sweep filters on. The scaler name is what keeps one scaler's (or one
 * orchestrator's) cleanup off another's containers; the agent id ties a container to a registry row.
 */
export function containerLabels(id: ContainerIdentity): Record<string, string> {
  const labels: Record<string, string> = {
    [LABEL_MANAGED]: 'true',
    [LABEL_SCALER]: id.scalerName,
    [LABEL_AGENT]: id.agentId,
    [LABEL_LABELS]: normalizeLabelSet([...id.labelSet]),
  };
  if (id.boundJobId) labels[LABEL_JOB] = id.boundJobId;
  if (id.runId) labels[LABEL_RUN] = id.runId;
  return labels;
}

const FORWARD_PREFIX = 'KICI_AGENT_ENV_';

export interface AgentEnvInput {
  orchestratorUrl: string;
  agentId: string;
  fullLabels: readonly string[];
  labelSet: LabelSetConfig;
  hostEnv: NodeJS.ProcessEnv;
  /** The job's own image runs the agent. */
  jobImage: boolean;
}

/**
 * The container's environment, in this order: identity, forwarded `KICI_AGENT_ENV_<X>` variables,
 * then the label set's own env, which wins. Nothing else of the orchestrator's environment crosses
 * over. The token is not in it: it is handed over as a file (token-handoff.ts), which the agent
 * removes once read.
 */
export function containerEnv(i: AgentEnvInput): string[] {
  const env: Record<string, string> = {
    KICI_ORCHESTRATOR_URL: i.orchestratorUrl,
    KICI_AGENT_ID: i.agentId,
    KICI_LABELS: i.fullLabels.join(','),
    KICI_SCALER_MANAGED: '1',
    KICI_EXECUTION_MODE: 'bare-metal',
  };
  if (i.labelSet.image) env.KICI_RUNTIME_IMAGE = i.labelSet.image;
  if (i.labelSet.backpressureMode) env.KICI_BACKPRESSURE_MODE = i.labelSet.backpressureMode;
  if (i.jobImage) env.KICI_JOB_IMAGE_AGENT = '1';
  for (const [k, v] of Object.entries(i.hostEnv)) {
    if (k.startsWith(FORWARD_PREFIX) && k.length > FORWARD_PREFIX.length && v !== undefined)
      env[k.slice(FORWARD_PREFIX.length)] = v;
  }
  Object.assign(env, i.labelSet.env ?? {});
  // Not the label set's to move or to put back where every step could read it.
  delete env.KICI_AGENT_TOKEN;
  delete env.KICI_AGENT_TOKEN_FD;
  env.KICI_AGENT_TOKEN_FILE = TOKEN_FILE;
  return Object.entries(env).map(([k, v]) => `${k}=${v}`);
}
