/**
 * Frames before authentication: malformed WebSocket frames, sent by hand after a real upgrade,
 * close that one connection with the documented code and never the server.
 */
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LIMITS } from '../../../src/protocol/limits.js';
import { bystanderJob, expectHealthy } from '../../helpers/adversarial.js';
import { uncaughtErrors, watchUncaught } from '../../helpers/uncaught.js';
import {
  bareMetalConfig,
  eventually,
  ROOT,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../../helpers/orchestrator.js';
import {
  frame,
  nextMessage,
  rawConnect,
  rawRegister,
  rawSessionOf,
  textFrame,
  within,
  type RawConn,
} from '../../helpers/raw-ws.js';

let t: TestOrchestrator;
let bystander: Awaited<ReturnType<typeof bystanderJob>>;
let token: string;

beforeAll(async () => {
  watchUncaught();
  t = await startTestOrchestrator({ config: bareMetalConfig() });
  bystander = await bystanderJob(t, ['linux', 'small']);
  const minted = await t.api<{ token: string }>('POST', '/api/v1/agents/tokens', {
    labels: ['frames'],
    agentId: 'frames-agent',
  });
  expect(minted.status).toBe(201);
  token = minted.body.token;
});

afterAll(async () => {
  await t?.stop();
});

/** After every attack: the server answers, the bystander is untouched, and an agent can still register. */
async function expectUnharmed(): Promise<void> {
  expect(uncaughtErrors()).toEqual([]);
  await expectHealthy(t);
  await bystander.check();
  const conn = await rawRegister(t.orch.url, 'frames-agent', token, ['frames']);
  conn.destroy();
}

/** RSS once it stopped moving, so start-up noise is not counted as growth. */
async function settledRss(): Promise<number> {
  let last = process.memoryUsage().rss;
  for (let i = 0; i < 20; i++) {
    await new Promise((r) => setTimeout(r, 100));
    const now = process.memoryUsage().rss;
    if (Math.abs(now - last) < 2 * 1024 * 1024) return Math.max(now, last);
    last = now;
  }
  return last;
}

async function closeCodeAfter(
  conn: RawConn,
  data: Buffer,
): Promise<{ code: number | undefined; reason: string }> {
  conn.send(data);
  const closed = await within(conn.closed, 5_000, 'the server to close the connection');
  conn.destroy();
  return closed;
}

const bad: { name: string; data: () => Buffer; code: number }[] = [
  {
    name: 'a payload length over the limit (1 GiB claimed)',
    data: () => frame({ payload: Buffer.alloc(0), claimedLength: 1n << 30n }),
    code: 1009,
  },
  {
    name: 'a 64-bit payload length with the top bit set',
    data: () => frame({ payload: Buffer.alloc(0), claimedLength: 1n << 63n }),
    code: 1009,
  },
  {
    name: 'invalid UTF-8 in a text frame',
    data: () => frame({ payload: Buffer.from([0x7b, 0xff, 0xfe, 0xc3, 0x28, 0x7d]) }),
    code: 1007,
  },
  { name: 'an unmasked client frame', data: () => frame({ payload: '{}', mask: false }), code: 1002 },
  { name: 'a reserved data opcode (0x3)', data: () => frame({ payload: '{}', opcode: 0x3 }), code: 1002 },
  { name: 'a reserved control opcode (0xB)', data: () => frame({ opcode: 0xb }), code: 1002 },
  { name: 'reserved bits set', data: () => frame({ payload: '{}', rsv: 0b111 }), code: 1002 },
  {
    name: 'a fragmented control frame',
    data: () => frame({ opcode: 0x9, fin: false }),
    code: 1002,
  },
  {
    name: 'a continuation with nothing to continue',
    data: () => frame({ payload: 'x', opcode: 0 }),
    code: 1002,
  },
];

describe('malformed frames before authentication', () => {
  for (const c of bad) {
    it(`${c.name} closes the connection with ${c.code}`, async () => {
      const conn = await rawConnect(t.orch.url);
      expect(conn.status).toBe(101);
      expect((await closeCodeAfter(conn, c.data())).code).toBe(c.code);
      await expectUnharmed();
    });
  }
});

describe('malformed frames after authentication', () => {
  for (const c of bad) {
    it(`${c.name} closes the connection with ${c.code}`, async () => {
      const conn = await rawRegister(t.orch.url, 'frames-agent', token, ['frames']);
      expect((await closeCodeAfter(conn, c.data())).code).toBe(c.code);
      await expectUnharmed();
    });
  }

  it(`a frame over the ${LIMITS.maxPayloadBytes} byte limit closes with 1009; one under it is read`, async () => {
    const conn = await rawRegister(t.orch.url, 'frames-agent', token, ['frames']);
    // Just under the limit: a heartbeat padded with an ignored field is still a message.
    const pad = 'x'.repeat(LIMITS.maxPayloadBytes - 100);
    conn.send(textFrame({ type: 'heartbeat', pad }));
    await within(
      (async () => {
        while (!conn.messages().some((m) => m.type === 'heartbeat.ack'))
          await new Promise((r) => setTimeout(r, 10));
      })(),
      10_000,
      'a heartbeat.ack for the large frame',
    );
    const over = Buffer.alloc(LIMITS.maxPayloadBytes + 1, 0x20);
    expect((await closeCodeAfter(conn, frame({ payload: over }))).code).toBe(1009);
    await expectUnharmed();
  });
});

describe('the server half of a log flood: an oversized log frame from a running job', () => {
  it('closes that agent with 1009; the job survives its reconnect and finishes', async () => {
    const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { chatty: { runsOn: ['frames'], steps: [{ run: 'true' }] } },
    });
    const jobId = run.body.jobs[0]!.id;
    const conn = await rawRegister(t.orch.url, 'frames-agent', token, ['frames']);
    await nextMessage(conn, (m) => m.type === 'job.assign' && (m.job as { id: string }).id === jobId);
    conn.send(textFrame({ type: 'job.started', jobId }));
    await t.waitForJob(jobId, ['running'], 10_000);
    // Control characters are escaped six-fold by JSON: 3 M of them make an 18 MB frame.
    const flood = textFrame({
      type: 'log',
      jobId,
      idx: 0,
      stream: 'stdout',
      lines: ['\u0001'.repeat(3_000_000)],
    });
    expect(flood.length).toBeGreaterThan(16 * 1024 * 1024);
    expect((await closeCodeAfter(conn, flood)).code).toBe(1009);
    await expectHealthy(t);

    // What the agent does next: reconnect, say which job it is running, and report it.
    const again = await rawConnect(t.orch.url);
    again.send(
      textFrame({
        type: 'register',
        protocol: 1,
        agentId: 'frames-agent',
        token,
        labels: ['frames'],
        activeJobId: jobId,
        // The same agent process: it proves the session its first registration was given.
        session: rawSessionOf(t.orch.url, 'frames-agent'),
      }),
    );
    const ack = await nextMessage(again, (m) => m.type === 'register.ack');
    expect(ack.resumeJobId).toBe(jobId);
    again.send(textFrame({ type: 'job.finished', jobId, result: 'succeeded', exitCode: 0 }));
    await nextMessage(again, (m) => m.type === 'job.finished.ack' && m.jobId === jobId);
    again.destroy();
    expect((await t.waitForJob(jobId)).state).toBe('succeeded');
    await expectUnharmed();
  });
});

describe('limits before authentication', () => {
  it(`more than ${LIMITS.preAuthBytes} bytes before register closes with 1009`, async () => {
    const conn = await rawConnect(t.orch.url);
    const closed = await closeCodeAfter(conn, textFrame({ type: 'register', pad: 'x'.repeat(20_000) }));
    expect(closed.code).toBe(1009);
    expect(closed.reason).toContain('before registration');
    await expectUnharmed();
  });

  it('forty unauthenticated 15 MB frames do not grow memory, and the server stays healthy', async () => {
    // What the server itself reads off each attacker's socket (observed, not changed).
    const server = (t.orch as unknown as { server: Server }).server;
    const reads: number[] = [];
    const observe = (_req: unknown, socket: Socket) => socket.on('close', () => reads.push(socket.bytesRead));
    server.on('upgrade', observe);
    const before = await settledRss();
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 10);
    const size = 15_000_000;
    const attacker = runNode([
      join(ROOT, 'test/helpers/ws-flood-attacker.ts'),
      t.orch.url,
      '40',
      String(size),
    ]);
    const done = await attacker.exited;
    clearInterval(sampler);
    server.off('upgrade', observe);
    expect(done.code, done.stderr).toBe(0);
    const sent = (JSON.parse(done.stdout) as { sent: number[] }).sent;
    const mb = (n: number) => (n / 1048576).toFixed(1);
    await eventually(() => reads.length === 40, 5_000, 'all forty attackers to be dropped');
    console.log(
      `pre-auth flood: rss ${mb(before)} MB before, peak +${mb(peak - before)} MB; ` +
        `the server read ${mb(reads.reduce((a, b) => a + b, 0))} MB of the ${mb(sent.reduce((a, b) => a + b, 0))} MB the attackers wrote`,
    );
    // A connection is dropped within a socket buffer or so of the 16 KiB allowance.
    for (const r of reads) expect(r).toBeLessThan(1024 * 1024);
    expect(peak - before).toBeLessThan(100 * 1024 * 1024);
    await expectUnharmed();
  });

  it(`at most ${LIMITS.maxPendingPerAddress} unregistered connections from one address; more get 503 until some close`, async () => {
    const held: RawConn[] = [];
    try {
      for (let i = 0; i < LIMITS.maxPendingPerAddress; i++) {
        const conn = await rawConnect(t.orch.url);
        expect(conn.status).toBe(101);
        held.push(conn);
      }
      const refused = await rawConnect(t.orch.url);
      expect(refused.status).toBe(503);
      refused.destroy();
      held.pop()!.destroy();
      // The slot is freed once the server sees the close.
      let again: RawConn | undefined;
      for (let i = 0; i < 100 && again?.status !== 101; i++) {
        again?.destroy();
        await new Promise((r) => setTimeout(r, 20));
        again = await rawConnect(t.orch.url);
      }
      expect(again?.status).toBe(101);
      again?.destroy();
    } finally {
      for (const c of held) c.destroy();
    }
    await expectUnharmed();
  });
});

describe('malformed upgrade requests', () => {
  it('an upgrade with an unparseable URL is refused, not thrown', async () => {
    const conn = await rawConnect(t.orch.url, 'http://[');
    expect([400, 404]).toContain(conn.status);
    conn.destroy();
    await expectUnharmed();
  });

  it('a malformed HTTP request gets 400', async () => {
    const conn = await rawConnect(t.orch.url, '/ws HTTP/9\r\nBroken header');
    expect(conn.status).toBe(400);
    conn.destroy();
    await expectUnharmed();
  });

  it('an upgrade to another path gets 404', async () => {
    const conn = await rawConnect(t.orch.url, '/not-ws');
    expect(conn.status).toBe(404);
    conn.destroy();
    await expectUnharmed();
  });
});
