/**
 * Claim codes against a real server and the store's claim table: reuse, expiry, a wrong code and
 * use for another agent id are each refused with a reason that says which.
 */
import { WebSocket } from 'ws';
import { afterEach, describe, expect, it } from 'vitest';
import { StoreClaimStore } from '../../src/scaler/claim-store.js';
import { systemClock } from '../../src/util/clock.js';
import { startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';

let t: TestOrchestrator | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
});

const LABELS = ['cloud', 'kici:agent:event', 'kici:scaler:claims'];

/** Send frames in order; collect answers until the server closes. */
function session(url: string, frames: (answers: Record<string, unknown>[]) => unknown[] | undefined) {
  const ws = new WebSocket(url);
  const answers: Record<string, unknown>[] = [];
  ws.on('open', () => {
    for (const f of frames(answers) ?? []) ws.send(JSON.stringify(f));
  });
  ws.on('message', (d) => {
    answers.push(JSON.parse(String(d)) as Record<string, unknown>);
    for (const f of frames(answers) ?? []) ws.send(JSON.stringify(f));
  });
  return new Promise<{ code: number; reason: string; answers: typeof answers }>((r) =>
    ws.on('close', (code, why) => r({ code, reason: String(why), answers })),
  );
}

const claimOnly = (code: string) => (answers: unknown[]) =>
  answers.length === 0 ? [{ type: 'claim', protocol: 1, code }] : undefined;

async function setup(claimTtlSeconds = 300) {
  t = await startTestOrchestrator();
  const issuer = new StoreClaimStore(t.orch.store, systemClock, { scalerName: 'claims', claimTtlSeconds });
  const issue = (agentId: string) =>
    issuer.register({ agentId, labels: LABELS, orchestratorUrl: t!.orch.wsUrl, agentTokenTtlSeconds: 600 });
  return { issue };
}

describe('claim codes over the WebSocket claim step and HTTP', () => {
  it('a wrong code is refused as invalid', async () => {
    await setup();
    const res = await session(t!.orch.wsUrl, claimOnly('0'.repeat(64)));
    expect(res.code).toBe(4401);
    expect(res.reason).toBe('claim refused: invalid claim code');
  });

  it('a code redeems once; reuse is refused as already consumed, over WS and over HTTP', async () => {
    const { issue } = await setup();
    const code = await issue('scaler-event-1111aaaa');
    const first = await fetch(`${t!.orch.url}/scaler/claim`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ claimCode: code }),
    });
    expect(first.status).toBe(200);
    expect(first.headers.get('cache-control')).toBe('no-store');
    const creds = (await first.json()) as { agentToken: string; agentId: string; labels: string[] };
    expect(creds).toMatchObject({ agentId: 'scaler-event-1111aaaa', labels: LABELS });
    expect(await t!.orch.store.tokens.check(creds.agentToken, new Date())).toMatchObject({
      ok: true,
      kind: 'ephemeral',
    });
    const again = await session(t!.orch.wsUrl, claimOnly(code));
    expect(again.reason).toBe('claim refused: claim code already consumed');
    const http = await fetch(`${t!.orch.url}/scaler/claim`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ claimCode: code }),
    });
    expect(http.status).toBe(403);
    expect(await http.json()).toEqual({ error: 'claim refused', problems: ['claim code already consumed'] });
  }, 30_000);

  it('an expired code is refused as expired', async () => {
    const { issue } = await setup(1);
    const code = await issue('scaler-event-2222aaaa');
    await new Promise((r) => setTimeout(r, 1_100));
    const res = await session(t!.orch.wsUrl, claimOnly(code));
    expect(res.reason).toBe('claim refused: claim code expired');
  });

  it('a code used for another agent id is refused: over HTTP before it is spent, over WS at register', async () => {
    const { issue } = await setup();
    const code = await issue('scaler-event-3333aaaa');
    const http = await fetch(`${t!.orch.url}/scaler/claim`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ claimCode: code, agentId: 'scaler-event-4444bbbb' }),
    });
    expect(http.status).toBe(403);
    expect(((await http.json()) as { problems: string[] }).problems[0]).toBe(
      'claim code was issued for another agent id, not "scaler-event-4444bbbb"',
    );
    // Still unspent: the WS claim works, but the token only registers under the claim's own id.
    const res = await session(t!.orch.wsUrl, (answers) => {
      if (answers.length === 0) return [{ type: 'claim', protocol: 1, code }];
      const last = answers.at(-1)!;
      if (last.type === 'claim.ack') {
        expect(last.agentId).toBe('scaler-event-3333aaaa');
        return [
          {
            type: 'register',
            protocol: 1,
            agentId: 'scaler-event-4444bbbb',
            token: last.token,
            labels: LABELS,
          },
        ];
      }
      return undefined;
    });
    expect(res.code).toBe(4401);
    expect(res.reason).toBe('token is not valid for agent id "scaler-event-4444bbbb"');
  });
});
