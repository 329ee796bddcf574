/**
 * The heartbeat does not wait on this instance's part of the cluster view: a part that is slow (or
 * never finishes) costs the view, never the beat that tells the peers this instance is alive. And a
 * leadership change that lands while a beat is being written is written by a beat right after it.
 * Driven by a manual clock: no real waiting.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InstancesRepo, type InstanceBeat } from '../../../src/cluster/instances-repo.js';
import { InstancePresence } from '../../../src/cluster/presence.js';
import { ManualClock } from '../../../src/util/clock.js';
import { freshStore } from '../../helpers/data-dir.js';

const log = pino({ level: 'silent' });
/** Let promise callbacks already queued run. */
const settle = () => new Promise<void>((r) => setImmediate(r));

/** The real repository; its writes can be held at a gate, and the beats that reach it are kept. */
class GatedRepo extends InstancesRepo {
  beats: InstanceBeat[] = [];
  gate: Promise<void> | undefined;
  override async beat(b: InstanceBeat, fresh?: boolean): Promise<void> {
    this.beats.push(b);
    await this.gate;
    return super.beat(b, fresh);
  }
}

function deferred<T>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

let fresh: Awaited<ReturnType<typeof freshStore>>;
beforeAll(async () => {
  fresh = await freshStore();
});
afterAll(async () => {
  await fresh.close();
});

const INTERVAL = 1_000;
const WAIT = INTERVAL / 4;

describe('instance heartbeat and its part of the cluster view', () => {
  it('a part that never finishes holds up no beat; a slow one goes out with the first beat after it is ready', async () => {
    const clock = new ManualClock();
    const repo = new GatedRepo(fresh.store.db);
    const builds: ReturnType<typeof deferred<unknown>>[] = [];
    const facts = {
      address: () => 'http://x:1',
      agentsConnected: () => 0,
      jobsRunning: () => 0,
      isLeader: () => false,
      part: () => {
        builds.push(deferred<unknown>());
        return builds.at(-1)!.promise;
      },
    };
    const p = new InstancePresence(repo, 'orch-part', '1', INTERVAL, facts, log, clock);
    const started = p.start();
    await settle();
    expect(repo.beats).toHaveLength(0); // waiting for the part, but only so long
    clock.advance(WAIT);
    await started;
    expect(repo.beats).toHaveLength(1);
    expect(repo.beats[0]!.part).toBeUndefined();
    // The timer's beats from here: step to each one, then past its wait for the part.
    let due = clock.monotonic() + INTERVAL;
    const timerBeat = async () => {
      clock.advance(due - clock.monotonic());
      due += INTERVAL;
      await settle();
      clock.advance(WAIT);
      await p.beat(); // the timer's beat, in flight
    };

    // The first build is still running: the next beat waits on it (no second build), then goes.
    await timerBeat();
    expect(builds).toHaveLength(1);
    expect(repo.beats).toHaveLength(2);
    expect(repo.beats[1]!.part).toBeUndefined();

    // It finishes between beats: the next beat carries it, though that beat's own build hangs.
    const part = { scalerStatus: { configured: false, scalers: [] }, agents: [] };
    builds[0]!.resolve(part);
    await settle();
    await timerBeat();
    expect(builds).toHaveLength(2);
    expect(repo.beats).toHaveLength(3);
    expect(JSON.parse(repo.beats[2]!.part!)).toEqual(part);
    expect((await repo.peerParts('someone-else')).map((x) => x.instance)).toContain('orch-part');

    // Beats keep their rhythm while the part hangs.
    for (let i = 0; i < 3; i++) await timerBeat();
    expect(repo.beats).toHaveLength(6);
    await p.stop();
  });

  it('a change of leader during a beat that already read the facts is written right after it', async () => {
    const clock = new ManualClock();
    const repo = new GatedRepo(fresh.store.db);
    let leader = false;
    const facts = {
      address: () => 'http://x:1',
      agentsConnected: () => 0,
      jobsRunning: () => 0,
      isLeader: () => leader,
    };
    const p = new InstancePresence(repo, 'orch-lead', '1', INTERVAL, facts, log, clock);
    await p.start();
    const gate = deferred<void>();
    repo.gate = gate.promise;
    clock.advance(INTERVAL); // a beat with leader=false, held in its write
    expect(repo.beats.at(-1)!.leader).toBe(false);
    leader = true;
    const written = p.beatAfterChange();
    repo.gate = undefined;
    gate.resolve();
    await written;
    expect(repo.beats.at(-1)!.leader).toBe(true);
    expect((await repo.list()).find((r) => r.id === 'orch-lead')!.leader).toBe(true);
    await p.stop();
  });
});
