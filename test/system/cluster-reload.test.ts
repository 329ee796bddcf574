import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { ADMIN_BIN, AGENT_BIN, bareMetalConfig, runNode, writeConfig } from '../helpers/orchestrator.js';
import { startOrchestratorProcess, type OrchProcess } from '../helpers/orch-process.js';
import { freshTestDatabase, type TestDatabase } from '../helpers/pg-database.js';

/**
 * Reload fan-out: `kici-admin scaler reload` through one instance reloads all three (each its own
 * file) and reports each instance's result; one whose file is broken refuses and keeps its old
 * config.
 */

const tag = randomBytes(3).toString('hex');
let db: TestDatabase;
const orchs: OrchProcess[] = [];

beforeAll(async () => {
  db = await freshTestDatabase('clreload');
});
afterAll(async () => {
  for (const o of orchs) await o.stop();
  await db.drop();
});

const config = (maxAgents: number) =>
  bareMetalConfig({ name: `rl${tag}`, maxAgents }, [
    { labels: ['linux', `rl-${tag}`], binaryPath: AGENT_BIN },
  ]);

async function maxAgentsOf(o: OrchProcess): Promise<number> {
  const s = await o.api<{ scalers: { name: string; maxAgents: number }[] }>('GET', '/api/v1/scaler/status');
  return s.body.scalers.find((x) => x.name === `rl${tag}`)!.maxAgents;
}

describe('reload fan-out across three orchestrators', () => {
  it('a reload through A applies on A and C, is refused by B (broken file), and each result is shown', async () => {
    const env = { KICI_CLUSTER_HEARTBEAT_MS: '500' };
    const paths: string[] = [];
    for (const n of ['a', 'b', 'c']) {
      const path = await writeConfig(config(2));
      paths.push(path);
      orchs.push(
        await startOrchestratorProcess({
          databaseUrl: db.url,
          env,
          args: ['--instance-id', `r${n}-${tag}`, '--config', path],
        }),
      );
    }
    const [a, b, c] = orchs as [OrchProcess, OrchProcess, OrchProcess];
    // All three see each other alive before the reload.
    await new Promise((r) => setTimeout(r, 1_200));
    await writeFile(paths[0]!, stringify(config(3)));
    await writeFile(paths[1]!, 'version: 1\nscalers: [ {name: broken\n');
    await writeFile(paths[2]!, stringify(config(3)));

    const out = await runNode([
      ADMIN_BIN,
      '--server',
      a.url,
      '--token',
      a.adminToken,
      'scaler',
      'reload',
      '--json',
    ]).exited;
    const r = JSON.parse(out.stdout) as {
      result: string;
      plan?: unknown;
      instances: { instance: string; result: string; problems: string[] }[];
    };
    expect(r.result).toBe('applied');
    expect(r.plan).toBeDefined();
    expect(r.instances.map((i) => [i.instance, i.result]).sort()).toEqual([
      [`ra-${tag}`, 'applied'],
      [`rb-${tag}`, 'rejected'],
      [`rc-${tag}`, 'applied'],
    ]);
    expect(r.instances.find((i) => i.instance === `rb-${tag}`)!.problems.join('\n')).toMatch(
      /scaler|yaml|config/i,
    );
    expect(out.code).toBe(1); // one instance refused: the command says so
    expect([await maxAgentsOf(a), await maxAgentsOf(b), await maxAgentsOf(c)]).toEqual([3, 2, 3]);

    const text = await runNode([ADMIN_BIN, '--server', c.url, '--token', c.adminToken, 'scaler', 'reload'])
      .exited;
    expect(text.stdout).toMatch(new RegExp(`^instance ra-${tag}: applied$`, 'm'));
    expect(text.stdout).toMatch(new RegExp(`^instance rb-${tag}: rejected$`, 'm'));

    // --single: only the instance asked reloads; the others keep what they have.
    for (const p of paths) await writeFile(p, stringify(config(4)));
    const single = await runNode([
      ADMIN_BIN,
      '--server',
      c.url,
      '--token',
      c.adminToken,
      'scaler',
      'reload',
      '--single',
      '--timeout',
      '5',
      '--json',
    ]).exited;
    expect(single.code, single.stderr).toBe(0);
    const one = JSON.parse(single.stdout) as { result: string; instances?: unknown };
    expect(one.result).toBe('applied');
    expect(one.instances).toBeUndefined();
    expect([await maxAgentsOf(a), await maxAgentsOf(b), await maxAgentsOf(c)]).toEqual([3, 2, 4]);
  });
});
