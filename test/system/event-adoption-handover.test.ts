/**
 * An event agent provisioned by A registers with B (two orchestrator processes on one PostgreSQL;
 * A configures the event scaler, B has an empty scaler file): B adopts it, runs its job and sends
 * the scale-down; A's stale prune forgets the provision without a failure.
 */
import { spawn as spawnChild } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { adoptionPair, metric, SCALER, SPAWN_TIMEOUT_MS } from '../helpers/adoption-orchestrators.js';
import { MARKER } from '../helpers/leftover-processes.js';
import { AGENT_BIN, eventually, NODE } from '../helpers/orchestrator.js';

const pair = adoptionPair();
const { agentPids, downsFor, hooks } = pair;

describe('an event agent provisioned by A registers with B (PostgreSQL, two processes)', () => {
  it('B adopts it, runs the job and sends the scale-down; A forgets the provision without a failure', async () => {
    const { a, b, db } = pair;
    const res = await fetch(`${a.url}/api/v1/runs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${a.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        jobs: { adopted: { runsOn: ['adopt-sys'], steps: [{ run: 'echo ran-adopted' }] } },
      }),
    });
    const jobId = ((await res.json()) as { jobs: { id: string }[] }).jobs[0]!.id;
    const up = await eventually(
      () => hooks.find((h) => h.event === 'kici.scaler.scale-up'),
      30_000,
      'the scale-up webhook',
    );
    const agentId = up.payload.agentId;
    // The "cloud" boots the instance, but its agent is pointed at B, not at A.
    const child = spawnChild(NODE, [AGENT_BIN], {
      detached: true,
      stdio: 'ignore',
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        [MARKER]: process.env[MARKER],
        KICI_SCALER_CLAIM_CODE: up.payload.claimCode,
        KICI_AGENT_ID: agentId,
        KICI_LABELS: up.payload.labels!.join(','),
        KICI_ORCHESTRATOR_URL: b.wsUrl,
        KICI_SCALER_MANAGED: '1',
      },
    });
    child.unref();
    agentPids.set(agentId, child.pid!);

    const job = await eventually(
      async () => {
        const r = await db.query(`select state, agent_id, owner_instance from jobs where id = $1`, [jobId]);
        const row = r.rows[0] as { state: string; agent_id: string; owner_instance: string };
        return ['succeeded', 'failed', 'cancelled', 'no-backend'].includes(row.state) && row;
      },
      60_000,
      'the job finished',
    );
    expect(job).toMatchObject({ state: 'succeeded', agent_id: agentId, owner_instance: b.id });
    await eventually(() => downsFor(agentId).length > 0, 20_000, 'the scale-down');
    expect(downsFor(agentId)[0]!.payload.reason).toBe('job-complete');
    // B sent it, not A. B counts it once the webhook answered, which is after the receiver saw it.
    const downLine = new RegExp(`^kici_orch_scaler_scale_down_emitted_total\\{scaler="${SCALER}"`);
    await eventually(async () => (await metric(b, downLine)) === 1, 10_000, 'B counts the scale-down');
    expect(await metric(a, downLine)).toBe(0);
    expect(b.output()).toContain('adopted an event agent spawned by another orchestrator');
    const outcome = await db.query(`select adopted_by from scaler_provision_outcomes where agent_id = $1`, [
      agentId,
    ]);
    expect(outcome.rows).toEqual([{ adopted_by: b.id }]);
    expect(
      (await db.query(`select 1 from scaler_spawning_agents where agent_id = $1`, [agentId])).rowCount,
    ).toBe(0);

    // A's prune runs a spawn deadline after the provision: it forgets it, and reports nothing.
    await eventually(
      () => a.output().includes('provision adopted by a peer; forgotten here'),
      SPAWN_TIMEOUT_MS + 15_000,
      "A's prune",
    );
    await new Promise((r) => setTimeout(r, 1_000));
    expect(a.output()).not.toContain('Scaler spawn failed');
    expect(await metric(a, /^kici_orch_scaler_external_provision_timeout_total\{/)).toBe(0);
    expect(downsFor(agentId)).toHaveLength(1);
    const again = await db.query(`select state, attempts from jobs where id = $1`, [jobId]);
    expect(again.rows[0].state).toBe('succeeded');
  }, 120_000);
});
