/**
 * A fuzz test of the agent WebSocket endpoint. Random and mutated frames and messages are sent
 * before and after authentication (with a real token); the server must survive every case.
 *
 * KICI_FUZZ_CASES sets the number of cases (default 2000); KICI_FUZZ_SEED replays a run.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { bystanderJob, expectHealthy } from '../../helpers/adversarial.js';
import { uncaughtErrors, watchUncaught } from '../../helpers/uncaught.js';
import { bareMetalConfig, startTestOrchestrator, type TestOrchestrator } from '../../helpers/orchestrator.js';
import { frame, rawConnect, rawRegister, sentCloseCode, type RawConn } from '../../helpers/raw-ws.js';
import { fuzzItems, mulberry32 } from '../../helpers/ws-fuzz-cases.js';

const CASES = Number(process.env.KICI_FUZZ_CASES ?? 2000);
const SEED = Number(process.env.KICI_FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 32));
const WORKERS = 8;

let t: TestOrchestrator;
let bystander: Awaited<ReturnType<typeof bystanderJob>>;
const tokens: string[] = [];

beforeAll(async () => {
  watchUncaught();
  t = await startTestOrchestrator({ config: bareMetalConfig() });
  bystander = await bystanderJob(t, ['linux', 'small']);
  for (let k = 0; k < WORKERS; k++) {
    const minted = await t.api<{ token: string }>('POST', '/api/v1/agents/tokens', {
      labels: ['fuzz'],
      agentId: `fuzz-${k}`,
    });
    expect(minted.status).toBe(201);
    tokens.push(minted.body.token);
  }
});

afterAll(async () => {
  await t?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

it(
  `survives ${CASES} fuzzed WebSocket cases before and after authentication`,
  async () => {
    console.log(`ws fuzz: ${CASES} cases, seed ${SEED} (replay with KICI_FUZZ_SEED=${SEED})`);
    // A job for the fuzzed agents, so that messages about a real, active job are in the mix.
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { target: { runsOn: ['fuzz'], steps: [{ run: 'true' }] } },
    });
    const jobIds = [run.body.jobs[0]!.id, bystander.jobId, 'j-000000000000'];
    const closeCodes = new Map<string, number>();
    let next = 0;
    let registered = 0;
    const started = Date.now();

    async function worker(k: number): Promise<void> {
      for (let n = next++; n < CASES; n = next++) {
        const rand = mulberry32(SEED + n);
        const afterAuth = rand() < 0.5;
        let conn: RawConn;
        try {
          if (afterAuth) {
            conn = await rawRegister(t.orch.url, `fuzz-${k}`, tokens[k]!, ['fuzz']);
            registered++;
          } else conn = await rawConnect(t.orch.url);
        } catch (err) {
          throw new Error(`case ${n} (seed ${SEED}): could not connect: ${(err as Error).message}`, {
            cause: err,
          });
        }
        expect(conn.status, `case ${n} (seed ${SEED})`).toBe(101);
        // Close codes this case sent: the server echoes a peer's close frame with its code.
        const sent = new Set<number>();
        for (const item of fuzzItems(rand, jobIds)) {
          const code = sentCloseCode(item);
          if (code !== undefined) sent.add(code);
          conn.send(item);
          if (rand() < 0.3) await sleep(1);
        }
        const closed = await Promise.race([conn.closed, sleep(40).then(() => undefined)]);
        const echoed = closed?.code !== undefined && sent.has(closed.code);
        const key = closed ? (echoed ? 'echo' : String(closed.code ?? 'tcp')) : 'open';
        closeCodes.set(key, (closeCodes.get(key) ?? 0) + 1);
        // Now and then a clean close frame, so that path is exercised too.
        if (!closed && rand() < 0.2) conn.send(frame({ opcode: 8, payload: Buffer.from([0x03, 0xe8]) }));
        conn.destroy();
      }
    }

    try {
      await Promise.all(Array.from({ length: WORKERS }, (_, k) => worker(k)));
      const seconds = ((Date.now() - started) / 1000).toFixed(1);
      console.log(
        `ws fuzz: ${CASES} cases in ${seconds}s, ${registered} after authentication; close codes ${JSON.stringify(Object.fromEntries(closeCodes))}`,
      );
      // Zero server exits: nothing escaped to the process (it would have killed a real orchestrator).
      expect(uncaughtErrors()).toEqual([]);
      // No case ended in an internal error the server chose (echoes of our own close codes are counted apart).
      expect(closeCodes.has('1011')).toBe(false);
      for (const code of ['1002', '1007', '1009', '4400'])
        expect(closeCodes.get(code) ?? 0).toBeGreaterThan(0);
      await expectHealthy(t);
      await bystander.check();
      // The endpoint and the whole path to a real agent still work.
      const conn = await rawRegister(t.orch.url, 'fuzz-0', tokens[0]!, ['fuzz']);
      conn.destroy();
      const after = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
        jobs: { after: { runsOn: ['linux', 'small'], steps: [{ run: 'echo still here' }] } },
      });
      expect((await t.waitForJob(after.body.jobs[0]!.id)).state).toBe('succeeded');
    } catch (err) {
      console.error(`ws fuzz failed with seed ${SEED}; replay with KICI_FUZZ_SEED=${SEED}`);
      throw err;
    }
    // Long mode (KICI_FUZZ_CASES=20000 and up) needs more than the default test timeout.
  },
  Math.max(120_000, CASES * 10),
);
