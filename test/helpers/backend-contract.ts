/**
 * The backend conformance suite: the rules every ScalerBackend must keep, whatever compute it drives.
 * Each check is a plain async function that throws on a violation, so the suite's own tests can run
 * it against a deliberately broken backend and expect the rejection. `describeBackendContract` wraps
 * every check in an `it`.
 */
import { randomUUID } from 'node:crypto';
import { describe, it } from 'vitest';
import type { ScalerEntry } from '../../src/config/index.js';
import type { ManagedAgent, ScalerBackend, SpawnContext } from '../../src/scaler/types.js';

/** What a check needs around the backend: ways to see the compute that do not ask the backend. */
export interface ContractFixture {
  backend: ScalerBackend;
  entry: ScalerEntry;
  /** A spawn context for the entry's first label set, with a credential the fixture's orchestrator accepts. */
  context(agentId: string, signal: AbortSignal): Promise<SpawnContext>;
  /** Does compute for this agent exist on the host (asked of the host, not the backend)? */
  computeExists(agentId: string): Promise<boolean>;
  /** Wait for the agent to register, run one job on it, and return the job's final state. */
  runJob(agentId: string): Promise<string>;
  /** Compute this backend did not start, carrying an id of its own. */
  foreignCompute(): Promise<{ agentId: string; ref: string; exists(): Promise<boolean> }>;
  /** A new instance of the backend on the same host and entry, as after an orchestrator restart. */
  restart(): Promise<ScalerBackend>;
  /** How many times this agent's compute was actually torn down, where the host can tell. */
  teardowns?(agentId: string): number;
  /** Remove everything the fixture and the backends it built still hold. */
  close(): Promise<void>;
}

export type MakeFixture = () => Promise<ContractFixture>;

export class ContractViolation extends Error {
  override readonly name = 'ContractViolation';
}

function check(ok: boolean, rule: string): asserts ok {
  if (!ok) throw new ContractViolation(rule);
}

const newId = () => `contract-${randomUUID().slice(0, 8)}`;

async function spawnOne(fx: ContractFixture, backend = fx.backend): Promise<ManagedAgent> {
  const id = newId();
  const agent = await backend.spawn(await fx.context(id, new AbortController().signal));
  check(agent.id === id, `spawn returned agent ${agent.id} for a request for ${id}`);
  return agent;
}

/** Run `body` on a fresh fixture and always close it. */
function withFixture(body: (fx: ContractFixture) => Promise<void>): (make: MakeFixture) => Promise<void> {
  return async (make) => {
    const fx = await make();
    try {
      await body(fx);
    } finally {
      await fx.close();
    }
  };
}

async function existing(fx: ContractFixture, ids: string[]): Promise<number> {
  let n = 0;
  for (const id of ids) if (await fx.computeExists(id)) n++;
  return n;
}

/** Start a spawn, do `during` while it is in flight, and say how the spawn ended. */
async function interrupt(
  fx: ContractFixture,
  during: (id: string, ctl: AbortController) => Promise<unknown> | void,
): Promise<{ id: string; outcome: 'resolved' | 'rejected' }> {
  const id = newId();
  const ctl = new AbortController();
  const ctx = await fx.context(id, ctl.signal);
  const spawning = fx.backend.spawn(ctx).then(
    () => 'resolved' as const,
    () => 'rejected' as const,
  );
  // No await between the call and `during`: the spawn is certainly still in flight.
  await during(id, ctl);
  return { id, outcome: await spawning };
}

export const contractChecks = {
  'spawn -> the agent registers -> a job runs': withFixture(async (fx) => {
    const agent = await spawnOne(fx);
    check(await fx.computeExists(agent.id), 'spawn resolved but no compute exists for the agent');
    check(fx.backend.getActiveCount() === 1, 'getActiveCount is not 1 after one spawn');
    const state = await fx.runJob(agent.id);
    check(state === 'succeeded', `the job on the spawned agent ended ${state}`);
    await fx.backend.destroy(agent.id, { reason: 'job-complete' });
    check(!(await fx.computeExists(agent.id)), 'compute is still there after destroy');
  }),

  'repeated and concurrent destroy tear down exactly once': withFixture(async (fx) => {
    const a = await spawnOne(fx);
    const b = await spawnOne(fx);
    await Promise.all([1, 2, 3].map(() => fx.backend.destroy(a.id, { reason: 'job-complete' })));
    check(!(await fx.computeExists(a.id)), 'compute is still there after concurrent destroys');
    await fx.backend.destroy(a.id, { reason: 'job-complete' });
    await fx.backend.destroy('contract-never-spawned', { reason: 'orphan' });
    check(await fx.computeExists(b.id), "destroying one agent again tore down another agent's compute");
    check(fx.backend.getActiveCount() === 1, 'getActiveCount changed on a repeated destroy');
    if (fx.teardowns) {
      const n = fx.teardowns(a.id);
      check(n === 1, `four destroys of one agent tore its compute down ${n} times`);
    }
  }),

  'destroy during a spawn aborts it cleanly': withFixture(async (fx) => {
    const { id, outcome } = await interrupt(fx, (agentId) =>
      fx.backend.destroy(agentId, { reason: 'spawn-timeout' }),
    );
    check(outcome === 'rejected', 'a spawn destroyed while in flight still resolved an agent');
    check(!(await fx.computeExists(id)), 'compute is left after a destroy during its spawn');
    check(fx.backend.getActiveCount() === 0, 'getActiveCount counts an agent destroyed during its spawn');
  }),

  'an aborted spawn leaves no compute': withFixture(async (fx) => {
    const { id, outcome } = await interrupt(fx, (_id, ctl) => ctl.abort(new Error('spawn deadline')));
    check(outcome === 'rejected', 'a spawn whose signal aborted still resolved an agent');
    check(!(await fx.computeExists(id)), 'compute is left after an aborted spawn');
    const early = newId();
    const ctl = new AbortController();
    ctl.abort(new Error('aborted before the call'));
    const pre = await fx.backend.spawn(await fx.context(early, ctl.signal)).then(
      () => 'resolved',
      () => 'rejected',
    );
    check(pre === 'rejected', 'a spawn with an already aborted signal resolved an agent');
    check(!(await fx.computeExists(early)), 'a spawn with an already aborted signal left compute');
    check(fx.backend.getActiveCount() === 0, 'getActiveCount counts aborted spawns');
  }),

  'shutdownAll honours the lifetime': withFixture(async (fx) => {
    const ids = [(await spawnOne(fx)).id, (await spawnOne(fx)).id];
    await fx.backend.shutdownAll();
    const left = await existing(fx, ids);
    if (fx.backend.capabilities.lifetime === 'orchestrator')
      check(left === 0, `an orchestrator-lifetime backend left ${left} agents running after shutdownAll`);
    else check(left === 2, `a cluster-lifetime backend tore down ${2 - left} agents on shutdownAll`);
  }),

  'reapUnowned removes only its own compute': withFixture(async (fx) => {
    const reap = fx.backend.reapUnowned?.bind(fx.backend);
    if (!reap) return; // optional part: a backend without it never reaps
    const foreign = await fx.foreignCompute();
    check(!(await reap(foreign.agentId, foreign.ref)), 'reapUnowned claimed to reap foreign compute');
    check(await foreign.exists(), 'reapUnowned removed compute this backend did not start');
    const tracked = await spawnOne(fx);
    check(!(await reap(tracked.id, tracked.backendRef)), 'reapUnowned reaped an agent the backend tracks');
    check(await fx.computeExists(tracked.id), 'reapUnowned removed a tracked agent');
    // The same compute seen by a restarted backend that did not adopt it: now it is an orphan of ours.
    const after = await fx.restart();
    const reaped = await after.reapUnowned!(tracked.id, tracked.backendRef);
    check(reaped, 'reapUnowned did not reclaim compute its own backend started');
    check(!(await fx.computeExists(tracked.id)), 'reapUnowned said it reaped, but the compute is there');
  }),

  'adopt after a restart': withFixture(async (fx) => {
    if (!fx.backend.adopt) return; // optional part: recovery then reclaims instead
    const agent = await spawnOne(fx);
    const after = await fx.restart();
    check(after.getActiveCount() === 0, 'a freshly started backend already counts agents');
    const ok = await after.adopt!(agent.id, agent.labelSet, agent.backendRef);
    check(ok, 'adopt refused compute that survived the restart');
    check(after.getActiveCount() === 1, 'an adopted agent is not counted');
    const gone = await after.adopt!('contract-gone', agent.labelSet, null);
    check(!gone, 'adopt accepted an agent whose compute does not exist');
    check(after.getActiveCount() === 1, 'a refused adopt changed the count');
    await after.destroy(agent.id, { reason: 'shutdown' });
    check(!(await fx.computeExists(agent.id)), 'destroying an adopted agent left its compute');
  }),

  'getActiveCount matches what exists': withFixture(async (fx) => {
    const ids: string[] = [];
    const same = async (when: string) => {
      const n = await existing(fx, ids);
      const said = fx.backend.getActiveCount();
      check(said === n, `${when}: getActiveCount says ${said}, ${n} exist`);
    };
    await same('before any spawn');
    ids.push((await spawnOne(fx)).id, (await spawnOne(fx)).id);
    await same('after two spawns');
    await fx.backend.destroy(ids[0]!, { reason: 'job-complete' });
    await same('after one destroy');
    const aborted = await interrupt(fx, (_id, ctl) => ctl.abort(new Error('deadline')));
    ids.push(aborted.id);
    await same('after an aborted spawn');
    await fx.backend.destroy(ids[1]!, { reason: 'idle' });
    await same('after the last destroy');
  }),

  // Policy code asks the capabilities instead of the backend's type, and then calls the parts they
  // promise: a capability claimed without its part fails at that call, one left undeclared is
  // skipped (orphans never swept, output never captured, a peer's adoption refused).
  'its capabilities say what it implements': withFixture(async (fx) => {
    const b = fx.backend;
    const has = (part: keyof ScalerBackend) => typeof b[part] === 'function';
    const caps = b.capabilities;
    check(
      caps.cleansOrphans === has('cleanupOrphans'),
      `cleansOrphans is ${caps.cleansOrphans}, cleanupOrphans ${has('cleanupOrphans') ? 'implemented' : 'missing'}`,
    );
    check(
      caps.capturesLogs === has('getLogCapture'),
      `capturesLogs is ${caps.capturesLogs}, getLogCapture ${has('getLogCapture') ? 'implemented' : 'missing'}`,
    );
    if (caps.peerAdoptable) {
      check(caps.lifetime === 'cluster', 'a peer-adoptable backend does not have cluster lifetime');
      check(has('adopt') && has('forget'), 'a peer-adoptable backend lacks adopt or forget');
    } else check(!has('forget'), 'forget is implemented but peerAdoptable is false');
  }),

  // Only for a backend that may start an agent while its record is written: it asks for the
  // record exactly once, and when the record cannot be written nothing it started may remain.
  'a spawn asks once for its record, and a refused one leaves no compute': withFixture(async (fx) => {
    if (!fx.backend.capabilities.provisionalLaunch) return; // optional part: records come first
    const spawnWith = async (write: () => Promise<void>) => {
      const id = newId();
      let asked = 0;
      const ctx = await fx.context(id, new AbortController().signal);
      const outcome = await fx.backend
        .spawn({
          ...ctx,
          record: () => {
            asked++;
            return write();
          },
        })
        .then(
          () => 'resolved' as const,
          () => 'rejected' as const,
        );
      return { id, asked, outcome };
    };
    const ok = await spawnWith(() => Promise.resolve());
    check(ok.outcome === 'resolved', 'a spawn whose record was written failed');
    check(ok.asked === 1, `a spawn asked for its record ${ok.asked} times`);
    check(await fx.computeExists(ok.id), 'a spawn whose record was written left no compute');
    await fx.backend.destroy(ok.id, { reason: 'job-complete' });
    const refused = await spawnWith(() => Promise.reject(new Error('the store refused the write')));
    check(refused.outcome === 'rejected', 'a spawn whose record could not be written resolved an agent');
    check(refused.asked === 1, `a spawn asked for its refused record ${refused.asked} times`);
    check(!(await fx.computeExists(refused.id)), 'compute is left after its record could not be written');
    check(fx.backend.getActiveCount() === 0, 'getActiveCount counts a spawn whose record was refused');
  }),

  'a reload check refuses bad label sets': withFixture(async (fx) => {
    const first = fx.entry.labelSets[0]!;
    const withLabels = (...sets: string[][]): ScalerEntry => ({
      ...fx.entry,
      labelSets: sets.map((labels) => ({ ...first, labels })),
    });
    check(fx.backend.checkReload(fx.entry).valid, 'checkReload refused the entry the backend runs');
    const bad: [string, ScalerEntry][] = [
      ['no label sets', { ...fx.entry, labelSets: [] }],
      ['a label set without labels', withLabels([])],
      ['the same label set twice', withLabels(['x', 'y'], ['y', 'x'])],
      ['a reserved kici: label', withLabels(['kici:os:linux'])],
      ['a label with a comma', withLabels(['a,b'])],
      ['a blank label', withLabels(['  '])],
    ];
    for (const [what, entry] of bad) {
      const r = fx.backend.checkReload(entry);
      check(!r.valid && r.errors.length > 0, `checkReload accepted ${what}`);
    }
    // A check changes nothing: the label set in force still spawns.
    const agent = await spawnOne(fx);
    check(await fx.computeExists(agent.id), 'after refused reload checks the backend no longer spawns');
    await fx.backend.destroy(agent.id, { reason: 'job-complete' });
  }),
} satisfies Record<string, (make: MakeFixture) => Promise<void>>;

export type ContractCheck = keyof typeof contractChecks;

export function describeBackendContract(name: string, makeBackend: MakeFixture): void {
  describe(`backend contract: ${name}`, () => {
    for (const [rule, run] of Object.entries(contractChecks)) it(rule, () => run(makeBackend));
  });
}
