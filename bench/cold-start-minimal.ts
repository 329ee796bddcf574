/**
 * The cold start through the least any orchestrator does (minimal-server.ts): the same submit from
 * its own process, the same confined launch as the floor's, the agent's ack and job in one turn,
 * and the step's start stamped in whole ms as our server stamps it.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { openDatabase } from '../dist/store/open.js';
import { handStartEnv, type ConfinedLaunch } from './cold-start-floor.ts';
import { median } from './stats.ts';
import { lineChild } from './line-child.ts';
import { submitClient } from './submit-client.ts';
import type { Rig } from './cold-start.ts';

export async function minimalRig(confined: ConfinedLaunch): Promise<Rig> {
  const server = await lineChild<{ stepAt?: number }>('minimal-server.ts', 'the minimal server');
  const client = await submitClient();
  const url = server.ready.url as string;
  return {
    async once(i) {
      // Armed once the previous agent has exited: each start is cold, as ours are.
      await server.ask({
        op: 'arm',
        file: confined.file,
        args: confined.args,
        env: handStartEnv(`minimal-${i}`, confined),
        ...confined.as,
      });
      const started = server.ask({ op: 'wait' });
      const res = await client.post(
        `${url}/api/v1/runs`,
        { 'content-type': 'application/json' },
        { jobs: { cold: { runsOn: ['linux', 'small'], steps: [{ run: 'true' }] } } },
      );
      if (res.status !== 201) throw new Error(`the minimal server answered ${res.status}`);
      return (await started).stepAt! - Math.floor(res.at);
    },
    async close() {
      await client.close();
      await server.close();
    },
  };
}

/**
 * What one durable write costs where a cold start makes its writes: the embedded store on disk,
 * each commit synced, after the process sat idle as it does while an agent boots (`idleMs`). Wall
 * time, median of `n`. The least any orchestrator that loses nothing adds to the minimal start is
 * one such commit: the job, the compute it asked for and the job's hand-over to it, made durable
 * together before the answer and the spawn.
 */
export async function syncedCommitAfterIdle(n = 30, idleMs = 60): Promise<number> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-bench-commit-'));
  const { db, close } = await openDatabase({ dataDir: dir, dataSync: 'on' });
  try {
    const took: number[] = [];
    for (let i = 0; i < n; i++) {
      await new Promise((r) => setTimeout(r, idleMs));
      const t0 = performance.now();
      await sql`insert into runs (id) values (${`commit-${i}`})`.execute(db);
      took.push(performance.now() - t0);
    }
    return median(took);
  } finally {
    await close();
    await rm(dir, { recursive: true, force: true });
  }
}
