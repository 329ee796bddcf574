/**
 * The contract suite can fail: each check is run against a RecordingBackend broken in exactly the
 * way that check forbids, and must reject with a ContractViolation naming the rule.
 */
import { describe, expect, it } from 'vitest';
import type { ScalerEntry } from '../../../src/config/index.js';
import type {
  BackendCapabilities,
  DestroyContext,
  ManagedAgent,
  SpawnContext,
  ValidationResult,
} from '../../../src/scaler/types.js';
import { contractChecks, ContractViolation, type ContractCheck } from '../../helpers/backend-contract.js';
import type { FakeHost } from '../../helpers/host-compute.js';
import { RecordingBackend } from '../../helpers/recording-backend.js';
import {
  recordingFixture,
  sharedStore,
  type RecordingVariant,
} from '../../helpers/recording-contract-fixture.js';

type Opts = { host?: FakeHost; lifetime?: BackendCapabilities['lifetime'] };

/** Resolves the spawn, but no compute ever appears: no agent can register. */
class StartsNothing extends RecordingBackend {
  override spawn(req: SpawnContext): Promise<ManagedAgent> {
    const p = super.spawn(req);
    this.host.compute.delete(req.agentId);
    return p;
  }
}

/** Checks "do I know it" before an await and forgets after it: concurrent destroys all tear down. */
class DestroysTwice extends RecordingBackend {
  override async destroy(agentId: string, ctx: DestroyContext): Promise<void> {
    const known = this.agents.has(agentId);
    await Promise.resolve();
    if (!known) return;
    this.host.compute.set(agentId, { owner: this.name });
    this.host.remove(agentId);
    await super.destroy(agentId, ctx);
  }
}

/** Destroy only handles agents whose spawn finished; one still spawning is left to come up. */
class IgnoresDestroyWhileSpawning extends RecordingBackend {
  override destroy(agentId: string, ctx: DestroyContext): Promise<void> {
    if (this.agents.get(agentId)?.state === 'spawning') return Promise.resolve();
    return super.destroy(agentId, ctx);
  }
}

/** Rejects an aborted spawn but leaves what it had started behind. */
class LeaksOnAbort extends RecordingBackend {
  override spawn(req: SpawnContext): Promise<ManagedAgent> {
    const leak = () => this.host.compute.set(req.agentId, { owner: this.name });
    if (req.signal.aborted) leak();
    else req.signal.addEventListener('abort', leak, { once: true });
    return super.spawn(req);
  }
}

/** Claims cluster lifetime but destroys everything when the orchestrator stops. */
class ShutdownIgnoresLifetime extends RecordingBackend {
  constructor(entry: ScalerEntry, opts: Opts) {
    super(entry, { ...opts, lifetime: 'cluster' });
  }
  override async shutdownAll(): Promise<void> {
    await Promise.all([...this.agents.keys()].map((id) => this.destroy(id, { reason: 'shutdown' })));
  }
}

/** Reaps whatever compute carries the id, whoever started it. */
class ReapsForeign extends RecordingBackend {
  override reapUnowned(agentId: string): Promise<boolean> {
    if (!this.host.compute.has(agentId)) return Promise.resolve(false);
    this.host.remove(agentId);
    return Promise.resolve(true);
  }
}

/** Says yes to every adopt, compute or not. */
class AdoptsAnything extends RecordingBackend {
  override adopt(agentId: string, labelSet: string[], ref: string | null): Promise<boolean> {
    void super.adopt(agentId, labelSet, ref);
    this.agents.set(agentId, { id: agentId, state: 'running', registered: false, adopted: true });
    return Promise.resolve(true);
  }
}

/** Counts every spawn it was asked for, destroyed or aborted ones included. */
class CountLies extends RecordingBackend {
  override getActiveCount(): number {
    return this.spawns.length;
  }
}

/** `Base` with some of its capabilities said otherwise, under its own name (the tests name it). */
function claiming(
  name: string,
  caps: Partial<BackendCapabilities>,
  Base = RecordingBackend,
): RecordingVariant {
  const Variant = class extends Base {
    constructor(entry: ScalerEntry, opts: Opts) {
      super(entry, opts);
      Object.assign(this.capabilities, caps);
    }
  };
  Object.defineProperty(Variant, 'name', { value: name });
  return Variant;
}

/** Has forget, which only a peer-adoptable backend may have. */
class Forgets extends RecordingBackend {
  forget(): void {}
}

/** Says it captures its agents' output, and has no getLogCapture to ask. */
const ClaimsLogCapture = claiming('ClaimsLogCapture', { capturesLogs: true });

/** The other ways capabilities and parts can disagree, each a variant of its own. */
const capabilityLies: RecordingVariant[] = [
  claiming('SweepsNothing', { cleansOrphans: true }),
  class HidesItsSweep extends RecordingBackend {
    cleanupOrphans(): Promise<number> {
      return Promise.resolve(0);
    }
  },
  class HidesItsCapture extends RecordingBackend {
    getLogCapture(): undefined {
      return undefined;
    }
  },
  claiming('AdoptableButDiesWithUs', { peerAdoptable: true }, Forgets),
  claiming('AdoptableWithoutForget', { lifetime: 'cluster', peerAdoptable: true }),
  Forgets,
];

/** Says it may start agents before their records exist, and never asks for a record. */
const IgnoresItsRecord = claiming('IgnoresItsRecord', { provisionalLaunch: true });

/** Accepts any label sets at all. */
class AcceptsBadLabelSets extends RecordingBackend {
  override checkReload(): ValidationResult {
    return { valid: true };
  }
}

const broken: Record<ContractCheck, RecordingVariant> = {
  'spawn -> the agent registers -> a job runs': StartsNothing,
  'repeated and concurrent destroy tear down exactly once': DestroysTwice,
  'destroy during a spawn aborts it cleanly': IgnoresDestroyWhileSpawning,
  'an aborted spawn leaves no compute': LeaksOnAbort,
  'shutdownAll honours the lifetime': ShutdownIgnoresLifetime,
  'reapUnowned removes only its own compute': ReapsForeign,
  'adopt after a restart': AdoptsAnything,
  'getActiveCount matches what exists': CountLies,
  'its capabilities say what it implements': ClaimsLogCapture,
  'a reload check refuses bad label sets': AcceptsBadLabelSets,
  'a spawn asks once for its record, and a refused one leaves no compute': IgnoresItsRecord,
};

const store = sharedStore();

describe('backend contract: every check fails for a backend that breaks its rule', () => {
  for (const [rule, Variant] of Object.entries(broken) as [ContractCheck, RecordingVariant][]) {
    it(`${rule} — fails for ${Variant.name}`, async () => {
      const make = recordingFixture(Variant, 'orchestrator', store);
      await expect(contractChecks[rule](make)).rejects.toBeInstanceOf(ContractViolation);
    });
  }

  it.each(capabilityLies.map((V) => [V.name, V] as const))(
    'its capabilities say what it implements — fails for %s',
    async (_name, Variant) => {
      const make = recordingFixture(Variant, 'orchestrator', store);
      await expect(contractChecks['its capabilities say what it implements'](make)).rejects.toBeInstanceOf(
        ContractViolation,
      );
    },
  );

  it('and each broken variant breaks only its own rule: it passes the other checks', async () => {
    // Guards against a variant that fails for an unrelated reason (which would prove nothing).
    const unrelatedFailures: string[] = [];
    for (const [rule, Variant] of Object.entries(broken) as [ContractCheck, RecordingVariant][]) {
      for (const other of Object.keys(contractChecks) as ContractCheck[]) {
        if (other === rule || !mustPass(Variant, other)) continue;
        await contractChecks[other](recordingFixture(Variant, 'orchestrator', store)).catch((err: unknown) =>
          unrelatedFailures.push(`${Variant.name} failed "${other}": ${(err as Error).message}`),
        );
      }
    }
    expect(unrelatedFailures).toEqual([]);
  });
});

/** Some breakages show in more than one check by nature (a lying count shows wherever counts are read). */
function mustPass(Variant: RecordingVariant, check: ContractCheck): boolean {
  const alsoFails: Partial<Record<string, ContractCheck[]>> = {
    StartsNothing: [
      'repeated and concurrent destroy tear down exactly once',
      'shutdownAll honours the lifetime',
      'reapUnowned removes only its own compute',
      'adopt after a restart',
      'getActiveCount matches what exists',
      'a reload check refuses bad label sets',
    ],
    CountLies: [
      'spawn -> the agent registers -> a job runs',
      'repeated and concurrent destroy tear down exactly once',
      'destroy during a spawn aborts it cleanly',
      'an aborted spawn leaves no compute',
      'adopt after a restart',
    ],
    // Its destroy yields before acting, so a spawn finishing meanwhile is not stopped either.
    DestroysTwice: ['destroy during a spawn aborts it cleanly'],
    IgnoresDestroyWhileSpawning: ['getActiveCount matches what exists'],
    LeaksOnAbort: ['getActiveCount matches what exists'],
  };
  return !(alsoFails[Variant.name] ?? []).includes(check);
}
