import type { Role } from '../access/roles.js';

/**
 * Who may call each route. `public` needs no token; `metrics` is `viewer` unless the operator
 * made the scrape endpoint public. Every route the HTTP API registers must be listed here (a test
 * walks the registered routes), so that a new route cannot be added without choosing its role.
 * `action` names the call in the audit trail.
 */
export type Access = Role | 'public' | 'metrics';
export interface RouteRule {
  access: Access;
  action: string;
}

export const ROUTE_RULES: Readonly<Record<string, RouteRule>> = {
  'GET /healthz': { access: 'public', action: 'health' },
  'GET /readyz': { access: 'public', action: 'ready' },
  'GET /metrics': { access: 'metrics', action: 'metrics.scrape' },
  // Agents redeem claim codes here; the code itself is the credential.
  'POST /scaler/claim': { access: 'public', action: 'claim.redeem' },
  // The dashboard's page and assets hold no data; everything it shows comes from the API below.
  'GET /': { access: 'public', action: 'dashboard.page' },
  'GET /login': { access: 'public', action: 'dashboard.login-page' },
  'POST /login': { access: 'public', action: 'dashboard.login' },
  'POST /logout': { access: 'public', action: 'dashboard.logout' },
  'GET /ui/:file': { access: 'public', action: 'dashboard.asset' },
  'GET /ui/vendor/:file': { access: 'public', action: 'dashboard.vendor' },
  'GET /api/v1/stream': { access: 'viewer', action: 'dashboard.stream' },

  'POST /api/v1/runs': { access: 'operator', action: 'run.submit' },
  'GET /api/v1/runs/:id': { access: 'viewer', action: 'run.get' },
  'GET /api/v1/jobs': { access: 'viewer', action: 'job.list' },
  'GET /api/v1/jobs/:id': { access: 'viewer', action: 'job.get' },
  'GET /api/v1/jobs/:id/logs': { access: 'viewer', action: 'job.logs' },
  'GET /api/v1/trace/jobs': { access: 'viewer', action: 'job.export-trace' },
  'POST /api/v1/jobs/:id/cancel': { access: 'operator', action: 'job.cancel' },
  'POST /api/v1/jobs/:id/retry': { access: 'operator', action: 'job.retry' },

  'GET /api/v1/agents': { access: 'viewer', action: 'agent.list' },
  'POST /api/v1/agents/:id/drain': { access: 'operator', action: 'agent.drain' },
  'POST /api/v1/agents/:id/resume': { access: 'operator', action: 'agent.resume' },
  'POST /api/v1/agents/tokens': { access: 'admin', action: 'agent-token.create' },
  'GET /api/v1/agents/tokens': { access: 'admin', action: 'agent-token.list' },
  'DELETE /api/v1/agents/tokens/:id': { access: 'admin', action: 'agent-token.revoke' },
  'POST /api/v1/agents/tokens/:id/rotate': { access: 'admin', action: 'agent-token.rotate' },

  'GET /api/v1/scaler/status': { access: 'viewer', action: 'scaler.status' },
  'GET /api/v1/scaler/diagnose': { access: 'viewer', action: 'scaler.diagnose' },
  'GET /api/v1/scaler/explain/:jobId': { access: 'viewer', action: 'scaler.explain' },
  'GET /api/v1/scaler/vms': { access: 'viewer', action: 'scaler.vms' },
  'POST /api/v1/scaler/reset-backoff': { access: 'operator', action: 'scaler.reset-backoff' },
  // A what-if replays the whole job history in a worker: an admin's, like a backup.
  'POST /api/v1/scaler/simulate': { access: 'admin', action: 'scaler.simulate' },

  // Pruning deletes history and a backup holds every row: both are an admin's.
  'POST /api/v1/prune': { access: 'admin', action: 'retention.prune' },
  'GET /api/v1/database': { access: 'viewer', action: 'retention.database' },
  'GET /api/v1/backup': { access: 'admin', action: 'backup.take' },
  'POST /api/v1/scaler/reload': { access: 'operator', action: 'scaler.reload' },
  'POST /api/v1/scaler/reap-orphans': { access: 'admin', action: 'scaler.reap-orphans' },
  'GET /api/v1/scaler/audit': { access: 'viewer', action: 'scaler.audit' },
  // Reconciling kills compute and revokes tokens, as reap-orphans does.
  'POST /api/v1/scaler/audit/fix': { access: 'admin', action: 'scaler.audit-fix' },

  'GET /api/v1/events': { access: 'viewer', action: 'event.list' },
  'GET /api/v1/events/:id': { access: 'viewer', action: 'event.get' },
  'GET /api/v1/cluster/status': { access: 'viewer', action: 'cluster.status' },
  'GET /api/v1/cluster/settings': { access: 'viewer', action: 'cluster.settings' },
  // Retunes every orchestrator on the database at once.
  'PUT /api/v1/cluster/settings': { access: 'admin', action: 'cluster.settings-set' },

  'POST /api/v1/access/tokens': { access: 'admin', action: 'access-token.create' },
  'GET /api/v1/access/tokens': { access: 'admin', action: 'access-token.list' },
  'DELETE /api/v1/access/tokens/:id': { access: 'admin', action: 'access-token.revoke' },
  // Who did what is itself sensitive (token names, addresses): admins only.
  'GET /api/v1/audit': { access: 'admin', action: 'audit.list' },
};

export interface MatchedRoute {
  key: string;
  rule: RouteRule;
  params: Record<string, string>;
}

interface Compiled {
  key: string;
  method: string;
  segments: string[];
  rule: RouteRule;
}

// Literal segments win over parameters (`/agents/tokens` before `/agents/:id`).
const COMPILED: Compiled[] = Object.entries(ROUTE_RULES)
  .map(([key, rule]) => {
    const [method, path] = key.split(' ') as [string, string];
    return { key, method, segments: path.split('/').slice(1), rule };
  })
  .sort(
    (a, b) =>
      a.segments.filter((s) => s.startsWith(':')).length - b.segments.filter((s) => s.startsWith(':')).length,
  );

/** The rule for a request, or undefined for a route that does not exist. HEAD is read as GET. */
export function matchRoute(method: string, path: string): MatchedRoute | undefined {
  const m = method === 'HEAD' ? 'GET' : method;
  const parts = path.split('/').slice(1);
  for (const c of COMPILED) {
    if (c.method !== m || c.segments.length !== parts.length) continue;
    const params: Record<string, string> = {};
    let ok = true;
    for (let i = 0; i < parts.length && ok; i++) {
      const seg = c.segments[i]!;
      if (seg.startsWith(':')) {
        if (parts[i] === '') ok = false;
        else params[seg.slice(1)] = decodeURIComponentSafe(parts[i]!);
      } else ok = seg === parts[i];
    }
    if (ok) return { key: c.key, rule: c.rule, params };
  }
  return undefined;
}

function decodeURIComponentSafe(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
