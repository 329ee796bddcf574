import type { LabelSetConfig } from '../../../config/index.js';

/** Host variables a default (untrusted) agent process inherits; nothing else crosses over. */
export const ENV_ALLOWLIST = [
  'PATH',
  'HOME',
  'USER',
  'SHELL',
  'LANG',
  'LC_ALL',
  'TERM',
  'TMPDIR',
  'NODE_PATH',
  'TZ',
  // Windows hosts: without these a Node agent cannot find its temp dir, profile or shell.
  'PATHEXT',
  'SystemRoot',
  'windir',
  'COMSPEC',
  'TEMP',
  'TMP',
  'USERPROFILE',
  'LOCALAPPDATA',
  'APPDATA',
  'PROCESSOR_ARCHITECTURE',
  'NUMBER_OF_PROCESSORS',
] as const;

/**
 * Never handed to an agent, even in the trusted profile: the orchestrator's own credentials and
 * settings (a job must not reach the database or the admin API through them), any KiCI variable
 * that names a secret, and the raw `KICI_AGENT_ENV_*` forms (they are forwarded under their own
 * names, after this profile).
 */
export const SCRUB_LIST: readonly RegExp[] = [
  /^KICI_(ADMIN_TOKEN|DATABASE_URL|AGENT_TOKEN|SCALER_CLAIM_CODE|DATA_DIR|SCALER_CONFIG_PATH|SCALER_CONFIG_DIR|LISTEN|INSTANCE_ID|MACHINE_LEDGER_DIR|SERVER_URL|URL)$/,
  /^KICI_.*(TOKEN|SECRET|PASSWORD|KEY)/,
  /^KICI_AGENT_ENV_/,
  /^PG(PASSWORD|PASSFILE|USER|HOST|HOSTADDR|PORT|DATABASE|SERVICE|SERVICEFILE)$/,
  /^DATABASE_URL$/,
];

export function scrubbed(name: string): boolean {
  return SCRUB_LIST.some((re) => re.test(name));
}

export const AGENT_ENV_PREFIX = 'KICI_AGENT_ENV_';

/** `KICI_AGENT_ENV_<X>=v` on the orchestrator becomes `<X>=v` on every agent. */
export function forwardedAgentEnv(hostEnv: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  // Names first, values only of the matches: every read of process.env is a call into the
  // runtime, and this runs on each cold start.
  for (const k of Object.keys(hostEnv)) {
    if (!k.startsWith(AGENT_ENV_PREFIX) || k.length === AGENT_ENV_PREFIX.length) continue;
    const v = hostEnv[k];
    if (v !== undefined) out[k.slice(AGENT_ENV_PREFIX.length)] = v;
  }
  return out;
}

export interface AgentIdentityEnv {
  orchestratorUrl: string;
  agentId: string;
  fullLabels: string[];
}

/**
 * The descriptor an agent process reads its token from. The token is never in the agent's
 * environment: /proc/<pid>/environ would show it to every job the agent runs, for its whole life.
 */
export const TOKEN_FD = 3;

/**
 * The environment of a bare-metal agent process, built from scratch: allowlist (or, when the label
 * set opts in with KICI_TRUSTED_ENV=true, the host env minus secrets), then forwarded variables,
 * then the agent's identity, then the label set's own env, which wins.
 */
export function buildAgentEnv(
  hostEnv: NodeJS.ProcessEnv,
  labelSet: LabelSetConfig,
  id: AgentIdentityEnv,
): { env: Record<string, string>; trusted: boolean } {
  const forwarded = forwardedAgentEnv(hostEnv);
  const trusted = labelSet.env?.KICI_TRUSTED_ENV === 'true' || forwarded.KICI_TRUSTED_ENV === 'true';
  const env: Record<string, string> = {};
  if (trusted) {
    for (const [k, v] of Object.entries(hostEnv)) if (v !== undefined && !scrubbed(k)) env[k] = v;
  } else {
    for (const k of ENV_ALLOWLIST) if (hostEnv[k] !== undefined) env[k] = hostEnv[k]!;
  }
  Object.assign(env, forwarded, {
    KICI_AGENT_TOKEN_FD: String(TOKEN_FD),
    KICI_ORCHESTRATOR_URL: id.orchestratorUrl,
    KICI_AGENT_ID: id.agentId,
    KICI_LABELS: id.fullLabels.join(','),
    KICI_SCALER_MANAGED: '1',
    KICI_EXECUTION_MODE: 'bare-metal',
    KICI_PORT: '0',
    // We parse its lines into fields: it must write JSON whatever the host's own setting.
    KICI_LOG_FORMAT: 'json',
  });
  if (labelSet.image) env.KICI_RUNTIME_IMAGE = labelSet.image;
  if (labelSet.backpressureMode) env.KICI_BACKPRESSURE_MODE = labelSet.backpressureMode;
  Object.assign(env, labelSet.env ?? {});
  // A label set's env may not put a token back where every job could read it.
  delete env.KICI_AGENT_TOKEN;
  env.KICI_AGENT_TOKEN_FD = String(TOKEN_FD);
  return { env, trusted };
}
