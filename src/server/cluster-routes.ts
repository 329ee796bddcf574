/** Cluster routes (instances on one database); registered by createHttpApi. */
import type { Hono } from 'hono';
import type { LiveScalerSettings } from '../cluster/live-settings.js';
import type { Clock } from '../util/clock.js';
import { bad, readJsonBody } from './http-validation.js';

export interface ClusterRouteDeps {
  clusterStatus?: (() => Promise<unknown>) | undefined;
  clusterSettings?: LiveScalerSettings | undefined;
  clock: Clock;
}

export function registerClusterRoutes(app: Hono, deps: ClusterRouteDeps): void {
  // GET /api/v1/cluster/status → { self, instances: [...] } from the shared instances table.
  app.get('/api/v1/cluster/status', async (c) => {
    if (!deps.clusterStatus)
      return c.json({ error: 'not available', problems: ['this server reports no cluster status'] }, 404);
    return c.json(await deps.clusterStatus());
  });

  // GET /api/v1/cluster/settings → { settings: [{ key, value, instanceValue, effective, min, env, flag }] }
  app.get('/api/v1/cluster/settings', (c) => {
    if (!deps.clusterSettings)
      return c.json({ error: 'not available', problems: ['this server has no cluster settings'] }, 404);
    return c.json({ settings: deps.clusterSettings.view() });
  });

  // PUT /api/v1/cluster/settings { values: { <key>: <number | null> } } → the settings as now in force.
  app.put('/api/v1/cluster/settings', async (c) => {
    const live = deps.clusterSettings;
    if (!live)
      return c.json({ error: 'not available', problems: ['this server has no cluster settings'] }, 404);
    const body = await readJsonBody(c);
    if (!body.ok) return bad(c, body.problems);
    const values = (body.value as { values?: unknown } | null)?.values;
    if (values && typeof values === 'object')
      c.set('auditTarget', Object.keys(values).join(',').slice(0, 200));
    const r = await live.set(values, c.get('accessToken')?.name ?? null, new Date(deps.clock.now()));
    if (!r.ok) return bad(c, r.problems);
    return c.json({ settings: r.settings });
  });
}
