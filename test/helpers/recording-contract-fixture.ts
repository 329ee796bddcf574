/**
 * The contract fixture for the RecordingBackend: its compute is a FakeHost, and its "agent" is the
 * harness's fake agent, registered through the real dispatcher and real PGlite token store.
 */
import { afterAll, beforeAll } from 'vitest';
import type { ScalerEntry } from '../../src/config/index.js';
import type { Store } from '../../src/store/index.js';
import { agentLabelsFor } from '../../src/scaler/core/routing.js';
import type { BackendCapabilities } from '../../src/scaler/types.js';
import type { ContractFixture, MakeFixture } from './backend-contract.js';
import { FakeHost } from './host-compute.js';
import { ManagerHarness } from './manager-harness.js';
import { RecordingBackend } from './recording-backend.js';
import { bareMetal, scalerConfig } from './scaler-config.js';
import { wipeStore } from './store-per-file.js';
import { freshStore } from './data-dir.js';

/** One PGlite store for a whole test file (opened before, closed after its tests). */
export function sharedStore(): () => Store {
  let fresh: Awaited<ReturnType<typeof freshStore>> | undefined;
  beforeAll(async () => {
    fresh = await freshStore();
  }, 60_000);
  afterAll(async () => {
    await fresh?.close();
  });
  return () => fresh!.store;
}

export type RecordingVariant = new (
  entry: ScalerEntry,
  opts: { host?: FakeHost; lifetime?: BackendCapabilities['lifetime'] },
) => RecordingBackend;

/** The scaler under test serves `contract`; the harness's own scaler serves something else, so it never spawns. */
const entry = (): ScalerEntry =>
  scalerConfig({ version: 1, scalers: [bareMetal('rec', [['contract']])] }).scalers[0]!;

/**
 * A fixture per check. Pass `store` (a file-wide store, see sharedStore) to skip copying a fresh
 * PGlite database for every check; it is wiped before each use.
 */
export function recordingFixture(
  Variant: RecordingVariant = RecordingBackend,
  lifetime: BackendCapabilities['lifetime'] = 'orchestrator',
  store?: () => Store,
): MakeFixture {
  return async () => {
    const shared = store?.();
    if (shared) await wipeStore(shared);
    const h = await ManagerHarness.create({
      config: { version: 1, scalers: [bareMetal('elsewhere', [['unrelated']])] },
      ...(shared ? { store: shared } : {}),
    });
    const host = new FakeHost();
    const e = entry();
    const build = () => {
      const b = new Variant(e, { host, lifetime });
      b.autoResolve = true;
      // The harness finds a spawn's token through the backends it knows.
      h.built.push(b);
      return b;
    };
    const backend = build();
    const fx: ContractFixture = {
      backend,
      entry: e,
      async context(agentId, signal) {
        const fullLabels = agentLabelsFor(e, ['contract']);
        const { token } = await h.store.tokens.mint({
          agentId,
          labels: fullLabels,
          kind: 'static',
          now: new Date(h.clock.now()),
        });
        return {
          agentId,
          labelSet: ['contract'],
          fullLabels,
          mandatoryLabels: [],
          taints: [],
          orchestratorUrl: 'ws://127.0.0.1:1/ws',
          auth: { kind: 'token', token },
          limits: undefined,
          boundJobId: undefined,
          runId: undefined,
          image: undefined,
          signal,
          onEvent: () => {},
        };
      },
      computeExists: (agentId) => Promise.resolve(host.compute.has(agentId)),
      async runJob(agentId) {
        // A fake agent stands for the process: it can only register while its compute exists.
        if (!host.compute.has(agentId)) return 'never-registered';
        const reg = await h.registerAgent(agentId);
        if (!reg.ok) return `refused: ${reg.reason}`;
        const { ids } = await h.submit({ job: { runsOn: ['contract'] } });
        const [jobId] = h.assigned(agentId);
        if (jobId !== ids[0]) return `not assigned (${(await h.jobState(ids[0]!)) ?? '?'})`;
        await h.finishJob(agentId, jobId!);
        return (await h.jobState(jobId!)) ?? 'unknown';
      },
      foreignCompute() {
        const agentId = 'contract-foreign';
        host.compute.set(agentId, { owner: 'another-scaler' });
        return Promise.resolve({
          agentId,
          ref: `rec:${agentId}`,
          exists: () => Promise.resolve(host.compute.has(agentId)),
        });
      },
      restart: () => Promise.resolve(build()),
      teardowns: (agentId) => host.removals.get(agentId) ?? 0,
      async close() {
        await h.close();
      },
    };
    return fx;
  };
}
