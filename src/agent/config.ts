import { readFileSync } from 'node:fs';

/** Agent settings, read once from the environment (the scaler and operators both speak env). */
export interface AgentConfig {
  orchestratorUrl: string;
  agentId: string;
  /** Empty until a claim is redeemed when the agent was started with a claim code. */
  token: string;
  /** KICI_SCALER_CLAIM_CODE: redeemed for an id and a token when no token is given. */
  claimCode?: string | undefined;
  labels: string[];
  /** Single-use: exit after one job (set for every scaler-spawned agent). */
  ephemeral: boolean;
  scalerManaged: boolean;
  idleTimeoutMs: number;
  pendingDispatchTimeoutMs: number;
  /** Give up reconnecting after this long; 0 = keep trying forever. */
  reconnectTimeoutMs: number;
  workDir: string | undefined;
  keepWorkspace: boolean;
  /** KICI_JOB_IMAGE_AGENT=1: started inside the job's own image, for that one job. */
  jobImage: boolean;
  /** KICI_READY_SHELL=0 turns off starting step shells ahead (ready-shell.ts); on by default. */
  readyShell: boolean;
  /** KICI_CA_FILE: the CA certificates (PEM) that wss:// is verified against instead of the system's. */
  ca?: Buffer | undefined;
}

export class AgentConfigError extends Error {}

function intEnv(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new AgentConfigError(`${name} must be a non-negative number of ms`);
  return n;
}

/**
 * `KICI_URL` is the one orchestrator URL operators set for both kici-admin and agents: its http(s)
 * form names the API, and agents dial the `/ws` endpoint of the same origin. A ws(s) URL is used
 * as it is.
 */
export function agentUrlFromKiciUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new AgentConfigError(`KICI_URL must be an http(s) or ws(s) URL, got "${raw}"`);
  }
  if (url.protocol === 'ws:' || url.protocol === 'wss:') return raw;
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new AgentConfigError(`KICI_URL must be an http(s) or ws(s) URL, got "${raw}"`);
  const scheme = url.protocol === 'https:' ? 'wss:' : 'ws:';
  const base = url.pathname.replace(/\/+$/, '');
  return `${scheme}//${url.host}${base}/ws`;
}

export function readAgentConfig(env: NodeJS.ProcessEnv = process.env): AgentConfig {
  // With a claim code and no token, the id and the token come from the claim.
  const claimCode = env.KICI_AGENT_TOKEN ? undefined : env.KICI_SCALER_CLAIM_CODE || undefined;
  const required = claimCode ? [] : ['KICI_AGENT_ID', 'KICI_AGENT_TOKEN'];
  const missing = [
    ...(env.KICI_ORCHESTRATOR_URL || env.KICI_URL ? [] : ['KICI_URL (or KICI_ORCHESTRATOR_URL)']),
    ...required.filter((k) => !env[k]),
  ];
  if (missing.length) throw new AgentConfigError(`missing environment: ${missing.join(', ')}`);
  const url = env.KICI_ORCHESTRATOR_URL || agentUrlFromKiciUrl(env.KICI_URL!);
  if (!/^wss?:\/\//.test(url)) {
    throw new AgentConfigError(`KICI_ORCHESTRATOR_URL must be a ws:// or wss:// URL, got "${url}"`);
  }
  const scalerManaged = env.KICI_SCALER_MANAGED === '1';
  return {
    orchestratorUrl: url,
    agentId: env.KICI_AGENT_ID ?? '',
    token: env.KICI_AGENT_TOKEN ?? '',
    claimCode,
    labels: (env.KICI_LABELS ?? '')
      .split(',')
      .map((l) => l.trim().toLowerCase())
      .filter(Boolean),
    ephemeral: scalerManaged || env.KICI_EPHEMERAL === '1',
    scalerManaged,
    idleTimeoutMs: intEnv(env, 'KICI_SCALER_IDLE_TIMEOUT', 5_000),
    pendingDispatchTimeoutMs: intEnv(env, 'KICI_SCALER_PENDING_DISPATCH_TIMEOUT', 60_000),
    reconnectTimeoutMs: intEnv(env, 'KICI_AGENT_RECONNECT_TIMEOUT_MS', scalerManaged ? 60_000 : 0),
    workDir: env.KICI_WORK_DIR || undefined,
    keepWorkspace: env.KICI_KEEP_WORKSPACE === '1',
    jobImage: env.KICI_JOB_IMAGE_AGENT === '1',
    readyShell: env.KICI_READY_SHELL !== '0',
    ca: env.KICI_CA_FILE ? readCa(env.KICI_CA_FILE) : undefined,
  };
}

function readCa(path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new AgentConfigError(`KICI_CA_FILE: cannot read ${path}: ${(err as Error).message}`);
  }
}
