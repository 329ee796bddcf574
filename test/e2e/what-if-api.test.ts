/**
 * The dashboard's what-if endpoint on a real orchestrator with real bare-metal agents: the store's
 * trace of the last hour replayed against the running config and a pasted one, admin only, every
 * bad input refused with a 400 naming its field.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bareMetalConfig, startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';

let t: TestOrchestrator;
beforeAll(async () => {
  t = await startTestOrchestrator({ config: bareMetalConfig({ maxAgents: 4 }) });
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

interface Answer {
  problems?: string[];
  jobs?: number;
  table?: string;
  svg?: string;
  proposed?: { pools: { key: string; jobs: number; peakAgents: number }[] };
  current?: { pools: { key: string; jobs: number; peakAgents: number }[] };
}
const simulate = (body: unknown) => t.api<Answer>('POST', '/api/v1/scaler/simulate', body);

const PROPOSED = `version: 1
globalMaxAgents: 10
scalers:
  - name: bm
    type: bare-metal
    maxAgents: 1
    labelSets:
      - labels: [linux, small]
        binaryPath: /bin/true
        trust: host
`;

describe('POST /api/v1/scaler/simulate', () => {
  it('asks for a spawn time while the server has measured none', async () => {
    const r = await simulate({ proposed: PROPOSED, since: '1h' });
    expect(r.status).toBe(400);
    expect(r.body.problems![0]).toMatch(/^spawnMs: no spawn time for scaler "bm" \(type bare-metal\)/);
  });

  it('refuses bad input with a 400 naming the field', async () => {
    const cases: [unknown, RegExp][] = [
      [{ since: '1h' }, /^proposed: required/],
      [{ proposed: 'scalers: [', since: '1h' }, /^proposed: proposed\.yaml:/],
      [
        { proposed: PROPOSED.replace('maxAgents: 1', 'maxAgents: lots') },
        /^proposed: proposed\.yaml: scalers\[0\]\.maxAgents: .*\(line 6\)/,
      ],
      [{ proposed: PROPOSED, since: 'soon' }, /^since: "soon" is not a duration/],
      [{ proposed: PROPOSED, since: '400d' }, /^since: /],
      [{ proposed: PROPOSED, spawnMs: { 'bare-metal': -1 } }, /^spawnMs: /],
      [{ proposed: PROPOSED, releaseMs: 'slow' }, /^releaseMs: /],
      [{ proposed: PROPOSED, colour: 'blue' }, /^colour: unknown field/],
      [[1, 2], /^body: /],
    ];
    for (const [body, want] of cases) {
      const r = await simulate(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.problems!.join('\n'), JSON.stringify(body)).toMatch(want);
    }
  });

  it('replays the last hour against the running config and the proposed one, side by side', async () => {
    const { body } = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: Object.fromEntries(
        [0, 1, 2].map((i) => [`j${i}`, { runsOn: ['linux', 'small'], steps: [{ run: 'sleep 0.2' }] }]),
      ),
    });
    for (const j of body.jobs) expect((await t.waitForJob(j.id)).state).toBe('succeeded');
    // No spawnMs: the server's own spawn-latency measurement fills it in.
    const r = await simulate({ proposed: PROPOSED, since: '1h' });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.jobs).toBe(3);
    const pool = (a: Answer['current']) => a!.pools.find((p) => p.key === 'bm/linux,small')!;
    expect(pool(r.body.current).jobs).toBe(3);
    expect(pool(r.body.proposed).jobs).toBe(3);
    // The proposed cap of one agent is never exceeded; the running config may use up to four.
    expect(pool(r.body.proposed).peakAgents).toBe(1);
    expect(r.body.table).toMatch(/LABEL SET\s+METRIC\s+CURRENT\s+PROPOSED\s+DIFF/);
    expect(r.body.svg).toMatch(/^<svg[^>]*>/);
    expect(r.body.svg).not.toMatch(/<script/i);
  });

  it('is an admin call: a viewer is refused', async () => {
    const made = await t.api<{ token: string }>('POST', '/api/v1/access/tokens', {
      name: 'looker',
      role: 'viewer',
    });
    expect(made.status).toBe(201);
    const res = await fetch(`${t.orch.url}/api/v1/scaler/simulate`, {
      method: 'POST',
      headers: { authorization: `Bearer ${made.body.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ proposed: PROPOSED }),
    });
    expect(res.status).toBe(403);
  });
});
