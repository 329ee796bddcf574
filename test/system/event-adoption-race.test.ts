/**
 * The same event agents race to register with both of two orchestrator processes on one
 * PostgreSQL: exactly one instance adopts each, the gate comes from the spawn row, and the adopter
 * alone tears the agent down.
 */
import { WebSocket } from 'ws';
import { describe, expect, it } from 'vitest';
import { adoptionPair, emittedDown, SCALER, type Orch } from '../helpers/adoption-orchestrators.js';
import { eventually } from '../helpers/orchestrator.js';

const pair = adoptionPair();
const { downsFor } = pair;

interface Attempt {
  who: string;
  acked: boolean;
  code?: number;
  reason?: string;
  ws: WebSocket;
}

/** One registration over a plain WebSocket: acked (left open) or refused (closed). */
function register(o: Orch, agentId: string, token: string, labels: string[]): Promise<Attempt> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(o.wsUrl);
    ws.on('error', reject);
    ws.on('open', () =>
      ws.send(JSON.stringify({ type: 'register', agentId, token, labels, version: '0.0.0-test' })),
    );
    ws.on('message', (raw) => {
      const m = JSON.parse(String(raw)) as { type: string };
      if (m.type === 'register.ack') resolve({ who: o.id, acked: true, ws });
    });
    ws.on('close', (code, reason) => resolve({ who: o.id, acked: false, code, reason: String(reason), ws }));
  });
}

describe('the same agent presenting itself to both instances', () => {
  it('property over 8 provisions: exactly one instance adopts each; the gate comes from the row; the adopter alone tears it down', async () => {
    const { a, b, db, databaseUrl, hookUrl } = pair;
    const { openDatabase, createStore } = await import('../../src/store/index.js');
    const { StoreClaimStore } = await import('../../src/scaler/claim-store.js');
    const { systemClock } = await import('../../src/util/clock.js');
    const opened = await openDatabase({ url: databaseUrl });
    try {
      const issuer = new StoreClaimStore(createStore(opened.db), systemClock, {
        scalerName: SCALER,
        claimTtlSeconds: 300,
      });
      const winners = new Map<string, Attempt>();
      const tokens = new Map<string, string>();
      for (let i = 0; i < 8; i++) {
        const agentId = `scaler-event-race${String(i).padStart(4, '0')}`;
        const labels = ['adopt-gate', 'adopt-sys', 'kici:agent:event', `kici:scaler:${SCALER}`];
        await db.query(
          `insert into scaler_spawning_agents (agent_id, scaler_name, backend_type, peer_adoptable, label_set,
             owner_instance_id, backend_ref, mandatory_labels, provisioning_targets)
           values ($1, $2, 'event', true, '["adopt-sys"]', $3, $1, '["adopt-gate"]', $4)`,
          [agentId, SCALER, a.id, JSON.stringify([`webhook:${hookUrl}`])],
        );
        const code = await issuer.register({
          agentId,
          labels,
          agentTokenTtlSeconds: 600,
          orchestratorUrl: a.wsUrl,
        });
        const claimed = (await (
          await fetch(`${a.url}/scaler/claim`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ claimCode: code, agentId }),
          })
        ).json()) as { agentToken: string };
        // The agent also presents a self-reported label; its gate still comes from the row.
        const shown = [...labels, 'kici:os:linux'];
        const order = i % 2 ? [a, b] : [b, a];
        const tries = await Promise.all(order.map((o) => register(o, agentId, claimed.agentToken, shown)));
        const acked = tries.filter((t) => t.acked);
        expect(acked, JSON.stringify(tries.map((t) => [t.who, t.acked, t.code, t.reason]))).toHaveLength(1);
        const loser = tries.find((t) => !t.acked)!;
        // The loser is refused by whichever gate it reaches first: the adoption row (4403), or the
        // live session the winner already holds for this agent id cluster-wide (4412).
        if (loser.code === 4403)
          expect(loser.reason).toContain(`already adopted by orchestrator "${acked[0]!.who}"`);
        else {
          expect(loser.code).toBe(4412);
          expect(loser.reason).toContain('session refused');
        }
        winners.set(agentId, acked[0]!);
        tokens.set(agentId, claimed.agentToken);
        const row = await db.query(`select adopted_by from scaler_spawning_agents where agent_id = $1`, [
          agentId,
        ]);
        expect(row.rows[0].adopted_by).toBe(acked[0]!.who);
      }
      expect(new Set([...winners.values()].map((w) => w.who)).size).toBe(2);

      // The row's gate: a job without `adopt-gate` is never given to the adopted agent; one with it is.
      const [firstId, first] = [...winners.entries()][0]!;
      const host = first.who === a.id ? a : b;
      // Every adopted agent on that instance could take the job: listen on all of them.
      const assigned: string[] = [];
      for (const w of winners.values())
        w.ws.on('message', (raw) => {
          const m = JSON.parse(String(raw)) as { type: string; job?: { id?: string } };
          if (m.type === 'job.assign') assigned.push(m.job?.id ?? '?');
        });
      const submit = async (runsOn: string[]) => {
        const r = await fetch(`${host.url}/api/v1/runs`, {
          method: 'POST',
          headers: { authorization: `Bearer ${host.token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ jobs: { g: { runsOn, steps: [{ run: 'true' }] } } }),
        });
        return ((await r.json()) as { jobs: { id: string }[] }).jobs[0]!.id;
      };
      await submit(['adopt-sys']);
      await new Promise((r) => setTimeout(r, 2_000));
      expect(assigned).toEqual([]);
      const gated = await submit(['adopt-sys', 'adopt-gate']);
      await eventually(() => assigned.length === 1, 15_000, 'the gated job assigned');
      expect(assigned).toEqual([gated]);

      // Each adopter tears its agents down when they leave; the other instance never does.
      for (const w of winners.values()) w.ws.close();
      for (const [agentId, w] of winners) {
        // The adopter logs the scale-down once the webhook answered: after the receiver saw it.
        await eventually(
          () => downsFor(agentId).length > 0 && emittedDown(w.who === a.id ? a : b, agentId),
          20_000,
          `${agentId} scale-down, logged by its adopter`,
        );
        expect(emittedDown(w.who === a.id ? b : a, agentId), `${agentId} by the other`).toBe(false);
      }
      await new Promise((r) => setTimeout(r, 1_000));
      for (const agentId of winners.keys()) expect(downsFor(agentId)).toHaveLength(1);
      expect(firstId).toMatch(/^scaler-event-race/);

      // Coming back afterwards, to either instance, with its own token, is refused: no second adopter.
      for (const [agentId, w] of [...winners].slice(0, 2)) {
        for (const o of w.who === a.id ? [b, a] : [a, b]) {
          const back = await register(o, agentId, tokens.get(agentId)!, ['adopt-sys']);
          expect(back.acked, `${agentId} back on ${o.id}`).toBe(false);
        }
      }
      const outcomes = await db.query(
        `select agent_id, adopted_by from scaler_provision_outcomes where agent_id like 'scaler-event-race%'`,
      );
      expect(outcomes.rows).toHaveLength(8);
      for (const r of outcomes.rows as { agent_id: string; adopted_by: string }[])
        expect(r.adopted_by).toBe(winners.get(r.agent_id)!.who);
    } finally {
      await opened.close();
    }
  }, 120_000);
});
