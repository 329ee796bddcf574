import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_BIN, runNode } from '../helpers/orchestrator.js';
import { startOrchestratorProcess, type OrchProcess } from '../helpers/orch-process.js';
import { freshTestDatabase, type TestDatabase } from '../helpers/pg-database.js';

/**
 * Cluster settings across two orchestrators on one PostgreSQL: a value set through A is in force on
 * B at its next heartbeat-paced read, over B's own variable, and clearing it gives B its own back.
 */

let db: TestDatabase;
const orchs: OrchProcess[] = [];
const tag = randomBytes(3).toString('hex');

beforeAll(async () => {
  db = await freshTestDatabase('clsettings');
});
afterAll(async () => {
  for (const o of orchs) await o.stop();
  await db.drop();
});

interface Setting {
  key: string;
  value: number | null;
  instanceValue: number;
  effective: number;
}

async function ttlOn(o: OrchProcess): Promise<Setting> {
  const r = await o.api<{ settings: Setting[] }>('GET', '/api/v1/cluster/settings');
  return r.body.settings.find((s) => s.key === 'agent_token_ttl_ms')!;
}

/** B has read the settings again: it logs the values in force each time they change. */
async function bReads(o: OrchProcess, seen: number): Promise<void> {
  const until = Date.now() + 10_000;
  const count = () => o.output().stdout.split('cluster settings in force').length - 1;
  while (count() <= seen) {
    if (Date.now() > until) throw new Error('B did not read the cluster settings again within 10 s');
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('cluster settings in a cluster', () => {
  it('set on A, in force on B without a restart; "default" gives B its own value back', async () => {
    const common = { KICI_CLUSTER_HEARTBEAT_MS: '200' };
    orchs.push(
      await startOrchestratorProcess({
        databaseUrl: db.url,
        env: common,
        args: ['--instance-id', `cs-a-${tag}`],
      }),
      await startOrchestratorProcess({
        databaseUrl: db.url,
        env: { ...common, KICI_AGENT_TOKEN_TTL_MS: '90000' },
        args: ['--instance-id', `cs-b-${tag}`],
      }),
    );
    const [a, b] = orchs as [OrchProcess, OrchProcess];
    expect(await ttlOn(b)).toMatchObject({ value: null, instanceValue: 90_000, effective: 90_000 });

    const seen = b.output().stdout.split('cluster settings in force').length - 1;
    const set = await runNode([
      ADMIN_BIN,
      '--server',
      a.url,
      '--token',
      a.adminToken,
      'cluster-settings',
      'set',
      'agent_token_ttl_ms',
      '120000',
    ]).exited;
    expect(set.code, set.stderr).toBe(0);
    await bReads(b, seen);
    expect(await ttlOn(b)).toMatchObject({ value: 120_000, instanceValue: 90_000, effective: 120_000 });

    const again = b.output().stdout.split('cluster settings in force').length - 1;
    const cleared = await a.api('PUT', '/api/v1/cluster/settings', { values: { agent_token_ttl_ms: null } });
    expect(cleared.status).toBe(200);
    await bReads(b, again);
    expect(await ttlOn(b)).toMatchObject({ value: null, effective: 90_000 });
  });
});
