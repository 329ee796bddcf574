/** The probes and the scrape: `/healthz`, `/readyz` and `/metrics`, registered by createHttpApi. */
import type { Hono } from 'hono';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';
import type { DiskVerdict } from './disk-watch.js';
import { EXPIRING_SOON_MS } from './http-validation.js';
import type { Metrics } from './metrics.js';
import type { StoreProbe } from './readiness.js';

export interface HealthRouteDeps {
  store: Store;
  dispatcher: Dispatcher;
  clock: Clock;
  metrics: Metrics;
  isReady: () => boolean;
  /** A graceful stop is under way (checked before isReady). */
  isDraining?: () => boolean;
  /** When set, /readyz also requires the store to take writes. */
  readiness?: StoreProbe;
  /** The data dir's free space: below its floor, /readyz answers 503. */
  diskSpace?: { verdict(): DiskVerdict } | undefined;
}

export function registerHealthRoutes(app: Hono, deps: HealthRouteDeps): void {
  const { store, dispatcher } = deps;
  app.get('/healthz', (c) => c.json({ status: 'ok' }));
  app.get('/readyz', async (c) => {
    if (deps.isDraining?.()) return c.json({ status: 'draining' }, 503);
    if (!deps.isReady()) return c.json({ status: 'starting' }, 503);
    const disk = deps.diskSpace?.verdict();
    if (disk && !disk.ok) return c.json({ status: 'disk-low', problem: disk.problem }, 503);
    const health = deps.readiness ? await deps.readiness.current() : { ok: true as const };
    if (!health.ok) return c.json({ status: 'store-unwritable', problem: health.problem }, 503);
    return c.json({ status: 'ready' });
  });
  app.get('/metrics', async (c) => {
    deps.metrics.refresh(dispatcher);
    deps.metrics.agentTokensExpiring.set(
      await store.tokens.countExpiring(new Date(deps.clock.now()), EXPIRING_SOON_MS),
    );
    return c.text(await deps.metrics.registry.metrics(), 200, {
      'content-type': deps.metrics.registry.contentType,
    });
  });
}
