import type { LabelSetConfig } from '../../../config/index.js';
import type { Logger } from '../../../util/logger.js';

const KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** The MMDS payload and config drive are small; a runaway env must not crowd out the identity. */
export const GUEST_ENV_BUDGET_BYTES = 32_768;
const PREFIX = 'KICI_AGENT_ENV_';

export interface GuestIdentity {
  orchestratorUrl: string;
  agentId: string;
  auth: { kind: 'token'; token: string } | { kind: 'claim'; code: string };
  fullLabels: string[];
  gatewayIp: string;
  /** `/etc/hosts` lines for the guest (the scaler's `extraHosts`); the guest's init appends them. */
  hostsLines?: string[] | undefined;
}

/**
 * The scaler's `extraHosts` (`host:address`) as `/etc/hosts` lines, the way a container engine
 * writes them; `host-gateway` is the bridge gateway, where the orchestrator's host answers a VM.
 */
export function guestHostsLines(extraHosts: readonly string[] | undefined, gateway: string): string[] {
  return (extraHosts ?? []).map((entry) => {
    const colon = entry.indexOf(':');
    const host = entry.slice(0, colon);
    const address = entry.slice(colon + 1);
    return `${address === 'host-gateway' ? gateway : address} ${host}`;
  });
}

/** Single-quoted for /bin/sh: the guest sources the file. */
const quote = (v: string) => `'${v.replace(/'/g, `'\\''`)}'`;

/**
 * The guest agent's environment as `KEY='value'` lines: identity first, then forwarded
 * `KICI_AGENT_ENV_*` overlaid by the label set's `env` (valid keys only, within the budget; an
 * offending entry is skipped with a warning).
 */
export function buildGuestEnv(
  id: GuestIdentity,
  labelSet: LabelSetConfig,
  hostEnv: NodeJS.ProcessEnv,
  log: Logger,
): string {
  const identity: Record<string, string> = {
    KICI_ORCHESTRATOR_URL: id.orchestratorUrl,
    KICI_AGENT_ID: id.agentId,
    KICI_LABELS: id.fullLabels.join(','),
    KICI_SCALER_MANAGED: '1',
    KICI_GATEWAY_IP: id.gatewayIp,
    KICI_EXECUTION_MODE: 'firecracker',
    ...(id.auth.kind === 'token'
      ? { KICI_AGENT_TOKEN: id.auth.token }
      : { KICI_SCALER_CLAIM_CODE: id.auth.code }),
    ...(id.hostsLines?.length ? { KICI_GUEST_HOSTS: id.hostsLines.join('\n') } : {}),
    ...(labelSet.backpressureMode ? { KICI_BACKPRESSURE_MODE: labelSet.backpressureMode } : {}),
  };
  const extra: Record<string, string> = {};
  for (const [k, v] of Object.entries(hostEnv)) {
    if (k.startsWith(PREFIX) && k.length > PREFIX.length && v !== undefined)
      extra[k.slice(PREFIX.length)] = v;
  }
  Object.assign(extra, labelSet.env ?? {});
  let budget = GUEST_ENV_BUDGET_BYTES;
  const lines = Object.entries(identity).map(([k, v]) => `${k}=${quote(v)}`);
  for (const [k, v] of Object.entries(extra)) {
    if (k in identity) continue; // the identity is not the label set's to change
    if (!KEY.test(k)) {
      log.warn({ key: k }, 'agent env key skipped: not a shell variable name');
      continue;
    }
    const cost = Buffer.byteLength(k) + Buffer.byteLength(v) + 2;
    if (cost > budget) {
      log.warn({ key: k }, `agent env entry skipped: the ${GUEST_ENV_BUDGET_BYTES}-byte budget is used up`);
      continue;
    }
    budget -= cost;
    lines.push(`${k}=${quote(v)}`);
  }
  return lines.join('\n') + '\n';
}

/** ws://127.0.0.1:port/ from the orchestrator's own view becomes ws://<gateway>:port/ for a guest. */
export function guestOrchestratorUrl(
  url: string,
  gateway: string,
): { url: string; host: string; port: number } {
  const u = new URL(url);
  if (['127.0.0.1', 'localhost', '[::1]', '0.0.0.0'].includes(u.hostname)) u.hostname = gateway;
  const port = Number(u.port) || (u.protocol === 'wss:' ? 443 : 80);
  return { url: u.toString().replace(/\/$/, ''), host: u.hostname, port };
}
