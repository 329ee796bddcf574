/** Cluster routes (instances on one database); registered by createHttpApi. */
import type { Hono } from 'hono';

export interface ClusterRouteDeps {
  clusterStatus?: (() => Promise<unknown>) | undefined;
}

export function registerClusterRoutes(app: Hono, deps: ClusterRouteDeps): void {
  // GET /api/v1/cluster/status → { self, instances: [...] } from the shared instances table.
  app.get('/api/v1/cluster/status', async (c) => {
    if (!deps.clusterStatus)
      return c.json({ error: 'not available', problems: ['this server reports no cluster status'] }, 404);
    return c.json(await deps.clusterStatus());
  });
}
