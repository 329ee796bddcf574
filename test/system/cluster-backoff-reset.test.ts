import { chmod, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN_BIN,
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  runNode,
  writeConfig,
} from '../helpers/orchestrator.js';
import { startOrchestratorProcess, type OrchProcess } from '../helpers/orch-process.js';
import { freshTestDatabase, type TestDatabase } from '../helpers/pg-database.js';

/**
 * `kici-admin scaler reset-backoff` across a cluster: two orchestrators on one PostgreSQL; only B
 * runs the scaler, and its agent cannot start until the operator fixes it (a marker file stands
 * for the fix). B backs off for five minutes. The reset is sent to A, which runs no scaler at all:
 * B lifts its backoff at once, the job runs long before the backoff would have ended, and both
 * instances' status say who lifted it, through which instance, and when.
 */

const tag = randomBytes(3).toString('hex');
const id = (n: string) => `bo${n}-${tag}`;
const LABELS = ['linux', `fixme-${tag}`];
/** The label set as status shows it (its labels sorted). */
const LABEL_SET = [...LABELS].sort().join(',');
/** Long enough that a job done within the test's wait can only have run because of the reset. */
const BACKOFF_MS = 300_000;
let db: TestDatabase;
const orchs: OrchProcess[] = [];

beforeAll(async () => {
  db = await freshTestDatabase('boreset');
});
afterAll(async () => {
  for (const o of orchs) await o.stop();
  await db.drop();
});

interface Lift {
  labelSet: string;
  by: string;
  at: string;
  requestedBy: string | null;
  via: string | null;
}
interface ScalerRow {
  name: string;
  instance: string;
  backoff: { labelSet: string; retryInMs: number }[];
  backoffLifted: Lift[];
}

describe('reset-backoff on a cluster', () => {
  it('a reset sent to instance A lifts the backoff armed on instance B', async () => {
    // The agent command: it fails until the marker (the operator's fix) exists.
    const config = await writeConfig({});
    const marker = join(dirname(config), 'fixed');
    const agent = join(dirname(config), 'agent.sh');
    await writeFile(
      agent,
      `#!/bin/sh\n[ -e '${marker}' ] || { echo 'not installed yet' >&2; exit 1; }\nexec '${AGENT_BIN}' "$@"\n`,
    );
    await chmod(agent, 0o755);
    await writeFile(
      config,
      JSON.stringify(bareMetalConfig({ maxAgents: 1 }, [{ labels: LABELS, binaryPath: agent }])),
    );

    const env = {
      KICI_CLUSTER_HEARTBEAT_MS: '300',
      KICI_SCALER_PROVISION_BACKOFF_BASE_MS: String(BACKOFF_MS),
    };
    const a = await startOrchestratorProcess({ databaseUrl: db.url, env, args: ['--instance-id', id('a')] });
    orchs.push(a);
    const b = await startOrchestratorProcess({
      databaseUrl: db.url,
      env,
      args: ['--instance-id', id('b'), '--config', config],
    });
    orchs.push(b);

    // Submitted to B: A, which may not have read B's label sets yet, could judge it unrunnable.
    const run = await b.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { x: { runsOn: LABELS, steps: [{ run: 'echo after-the-fix' }] } },
    });
    expect(run.status).toBe(201);
    const jobId = run.body.jobs[0]!.id;

    // B's own (live) status: the label set blocked, and until when.
    const ownRow = async (o: OrchProcess, instance: string) => {
      const { body } = await o.api<{ scalers: ScalerRow[] }>('GET', '/api/v1/scaler/status');
      return body.scalers.find((s) => s.name === 'bm' && s.instance === instance);
    };
    const armedBefore = Date.now();
    const armed = await eventually(
      async () => (await ownRow(b, id('b')))?.backoff.find((x) => x.retryInMs > 0),
      60_000,
      "B's label set backing off",
    );
    expect(armed.labelSet).toBe(LABEL_SET);
    // No earlier than this, B would have tried again on its own.
    const backoffEnds = armedBefore + armed.retryInMs;
    expect(armed.retryInMs).toBeGreaterThan(BACKOFF_MS / 2);
    await writeFile(marker, '');

    const reset = await runNode([
      ADMIN_BIN,
      '--server',
      a.url,
      '--token',
      a.adminToken,
      'scaler',
      'reset-backoff',
      'bm',
      '--label-set',
      LABEL_SET,
      '--json',
    ]).exited;
    expect(reset.code, reset.stderr).toBe(0);
    expect(JSON.parse(reset.stdout)).toEqual({
      scaler: 'bm',
      cleared: [LABEL_SET],
      instances: [
        { instance: id('a'), answered: true, cleared: [] },
        { instance: id('b'), answered: true, cleared: [LABEL_SET] },
      ],
    });

    const done = await b.waitForJob(jobId, 60_000);
    expect(done.state).toBe('succeeded');
    expect(Date.now()).toBeLessThan(backoffEnds);

    // Status, asked of either instance, shows B's lift: by an operator, through A.
    const lift = (row: ScalerRow | undefined) => row?.backoffLifted.find((l) => l.labelSet === LABEL_SET);
    const mine = lift(await ownRow(b, id('b')));
    expect(mine).toMatchObject({ by: 'operator', via: id('a'), requestedBy: expect.any(String) });
    const seenFromA = await eventually(
      async () => lift(await ownRow(a, id('b'))),
      20_000,
      "B's lift as A shows it",
    );
    expect(seenFromA).toEqual(mine);
    const text = await runNode([ADMIN_BIN, '--server', a.url, '--token', a.adminToken, 'scaler', 'status'])
      .exited;
    expect(text.stdout, text.stderr).toMatch(
      new RegExp(
        `^bm( \\(${id('b')}\\))?: backoff of \\[${LABEL_SET}\\] lifted by an operator \\(token "[^"]+", via instance ${id('a')}\\) at ${mine!.at}`,
        'm',
      ),
    );

    // A scaler no instance runs is still refused by name.
    const missing = await runNode([
      ADMIN_BIN,
      '--server',
      a.url,
      '--token',
      a.adminToken,
      'scaler',
      'reset-backoff',
      'nope',
    ]).exited;
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no scaler named "nope" on any live instance/);
  });
});
