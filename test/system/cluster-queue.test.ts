import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { alive, bareMetalConfig, writeConfig, type runNode } from '../helpers/orchestrator.js';
import {
  startOrchestratorProcess,
  startStaticAgentProcess,
  type OrchProcess,
} from '../helpers/orch-process.js';
import { freshTestDatabase, type TestDatabase } from '../helpers/pg-database.js';

/**
 * Shared queue: three orchestrators on one PostgreSQL. Jobs are submitted round-robin; static
 * agents connect only to B and C, and only A has a (bare-metal) scaler. So jobs submitted to A must
 * run on B's and C's agents, and bare-metal jobs submitted to B and C must be scaled for by A.
 * Every step appends a unique mark to one shared file: each appears exactly once.
 */

const tag = randomBytes(3).toString('hex');
const STATIC = ['linux', `clq-${tag}`];
const BM = ['linux', `clqbm-${tag}`];
let db: TestDatabase;
let dir: string;
const orchs: OrchProcess[] = [];
const agents: ReturnType<typeof runNode>[] = [];

beforeAll(async () => {
  db = await freshTestDatabase('clqueue');
  dir = await mkdtemp(join(tmpdir(), 'kici-clqueue-'));
});
afterAll(async () => {
  for (const a of agents) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGTERM');
  await Promise.all(agents.map((a) => a.exited));
  for (const o of orchs) await o.stop();
  await db.drop();
  await rm(dir, { recursive: true, force: true });
});

describe('shared queue across three orchestrators', () => {
  it('300 jobs round-robin: each runs exactly once, A’s jobs on B’s and C’s agents, B’s and C’s bare-metal jobs scaled by A', async () => {
    const env = { KICI_CLUSTER_HEARTBEAT_MS: '1000' };
    const config = await writeConfig(
      bareMetalConfig({ name: `bm${tag}`, maxAgents: 4 }, [
        { labels: BM, binaryPath: join(process.cwd(), 'dist/cli/agent.js') },
      ]),
    );
    const a = await startOrchestratorProcess({
      databaseUrl: db.url,
      env,
      args: ['--instance-id', `qa-${tag}`, '--config', config],
    });
    const b = await startOrchestratorProcess({
      databaseUrl: db.url,
      env,
      args: ['--instance-id', `qb-${tag}`],
    });
    const c = await startOrchestratorProcess({
      databaseUrl: db.url,
      env,
      args: ['--instance-id', `qc-${tag}`],
    });
    orchs.push(a, b, c);
    for (const [o, n] of [
      [b, 'b'],
      [c, 'c'],
    ] as const)
      for (let i = 0; i < 2; i++)
        agents.push(await startStaticAgentProcess(o, `clq-${n}${i}-${tag}`, STATIC));

    const marks = join(dir, 'marks');
    const step = (s: string) => ({ run: `echo "$KICI_JOB_ID:${s}" >> ${marks}` });
    const submittedTo = new Map<string, OrchProcess>();
    const bareMetal = new Set<string>();
    const targets = [a, b, c];
    for (let r = 0; r < 30; r++) {
      const target = targets[r % 3]!;
      // Every third run of B and C carries bare-metal jobs, which only A can scale for.
      const bm = target !== a && r % 5 === 1;
      const jobs = Object.fromEntries(
        Array.from({ length: 10 }, (_, k) => [
          `j${k}`,
          { runsOn: bm && k < 5 ? BM : STATIC, steps: [step('a'), step('b')] },
        ]),
      );
      const res = await target.api<{ jobs: { id: string; name: string }[] }>('POST', '/api/v1/runs', {
        jobs,
      });
      expect(res.status).toBe(201);
      for (const j of res.body.jobs) {
        submittedTo.set(j.id, target);
        if (bm && Number(j.name.slice(1)) < 5) bareMetal.add(j.id);
      }
    }
    expect(submittedTo.size).toBe(300);
    expect(bareMetal.size).toBeGreaterThan(0);

    const ids = [...submittedTo.keys()];
    const done = await Promise.all(ids.map((id) => b.waitForJob(id, 240_000)));
    expect(done.filter((j) => j.state !== 'succeeded').map((j) => [j.id, j.state, j.reason])).toEqual([]);

    const lines = (await readFile(marks, 'utf8')).trim().split('\n');
    const counts = new Map<string, number>();
    for (const l of lines) counts.set(l, (counts.get(l) ?? 0) + 1);
    expect([...counts.keys()].sort()).toEqual(ids.flatMap((id) => [`${id}:a`, `${id}:b`]).sort());
    expect([...counts.entries()].filter(([, n]) => n !== 1)).toEqual([]);

    const byId = new Map(done.map((j) => [j.id, j]));
    const fromA = ids.filter((id) => submittedTo.get(id) === a && !bareMetal.has(id));
    expect(fromA.length).toBeGreaterThan(50);
    // A has no static agent: every static job submitted to it ran on an agent connected to B or C.
    for (const id of fromA) expect(byId.get(id)!.agentId).toMatch(new RegExp(`^clq-[bc]\\d-${tag}$`));
    // Bare-metal jobs submitted to B and C ran on agents A spawned.
    for (const id of bareMetal) expect(byId.get(id)!.agentId).not.toMatch(/^clq-/);
    for (const o of orchs) expect(o.running()).toBe(true);
  });
});
