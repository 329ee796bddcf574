/**
 * Cross-instance adoption of event agents on the real embedded store: a fresh PGlite store per
 * test, spawn rows as the spawner writes them, and ScalerManagers with their own instance ids
 * sharing the store, as orchestrators share PostgreSQL.
 */
import { afterEach } from 'vitest';
import type { ScalerConfig } from '../../src/config/index.js';
import { EventScalerBackend } from '../../src/scaler/backends/event/backend.js';
import { ScalerManager } from '../../src/scaler/manager.js';
import { createStore, type OpenedDatabase, type Store } from '../../src/store/index.js';
import { ManualClock } from '../../src/util/clock.js';
import { freshStore } from './data-dir.js';
import { CountingEmitter, eventEntry, FakeClaims, silent } from './event-backend.js';
import { scalerConfig } from './scaler-config.js';

/**
 * A fresh store for the test that calls it, closed after the test. `through` puts plugins between
 * the store and its database (a statement fault, say: statement-fault.ts).
 */
export function storePerTest(): (through?: (db: OpenedDatabase) => OpenedDatabase) => Promise<Store> {
  let open: Awaited<ReturnType<typeof freshStore>> | undefined;
  afterEach(async () => {
    await open?.close();
    open = undefined;
  });
  return async (through) => {
    open = await freshStore();
    return through ? createStore(through(open.db).db) : open.store;
  };
}

/** The targets orch-a recorded at spawn in every row insertRow writes. */
export const A_TARGETS = ['webhook:http://127.0.0.1:1/from-a'];

/** A spawn row as the spawner writes it (owner, gate and targets recorded at spawn). */
export async function insertRow(
  store: Store,
  agentId: string,
  over: { backendType?: string; owner?: string; gate?: string[]; boundJobId?: string | null } = {},
) {
  await store.db
    .insertInto('scaler_spawning_agents')
    .values({
      agent_id: agentId,
      scaler_name: 'cloud',
      backend_type: over.backendType ?? 'event',
      // What the spawn records for today's backends: of them only the event backend is peer-adoptable.
      peer_adoptable: (over.backendType ?? 'event') === 'event',
      label_set: JSON.stringify(['cloud', 'linux']),
      run_id: null,
      bound_job_id: over.boundJobId ?? null,
      owner_instance_id: over.owner ?? 'orch-a',
      backend_ref: agentId,
      mandatory_labels: JSON.stringify(over.gate ?? ['secure']),
      provisioning_targets: JSON.stringify(A_TARGETS),
      spawned_at: new Date(),
    })
    .execute();
}

function emptyConfig(): ScalerConfig {
  return scalerConfig({ version: 1, scalers: [] });
}

/** One orchestrator's manager: `cloud` configured (with its own targets) or not at all. */
export function instanceManager(
  store: Store,
  instanceId: string,
  opts: { configured: boolean; clock?: ManualClock },
) {
  const emitter = new CountingEmitter();
  const clock = opts.clock ?? new ManualClock(1_000_000);
  const entry = eventEntry({
    provisioningTargets: [`webhook:http://127.0.0.1:1/from-${instanceId}`],
    mandatoryLabels: [],
  });
  const backends = opts.configured
    ? [
        new EventScalerBackend({
          entry,
          emitter,
          claimStore: new FakeClaims(),
          requestId: () => 'req',
          logger: silent,
          now: () => clock.now(),
        }),
      ]
    : [];
  const config = opts.configured ? ({ ...emptyConfig(), scalers: [entry] } as ScalerConfig) : emptyConfig();
  const m = new ScalerManager({
    config,
    backends,
    store,
    clock,
    logger: silent,
    instanceId,
    orchestratorUrlFor: () => 'ws://127.0.0.1:1/ws',
    scaleEvents: emitter,
    spawnTimeoutMs: 10_000,
  });
  return { m, emitter, clock };
}
