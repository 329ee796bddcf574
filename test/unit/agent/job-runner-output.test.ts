import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { MAX_FRAME_BYTES } from '../../../src/agent/frames.js';
import { JobRunner } from '../../../src/agent/job-runner.js';
import type { AgentMessage } from '../../../src/protocol/messages.js';
import { MAX_LINE_CHARS, onLines } from '../../../src/util/lines.js';

async function runJob(run: string): Promise<{ result: string; msgs: AgentMessage[] }> {
  const msgs: AgentMessage[] = [];
  const runner = new JobRunner({
    job: { id: 'job-1', runId: 'run-1', name: 'unit', env: {}, steps: [{ name: 's', run }] },
    send: (m) => msgs.push(m),
  });
  return { result: await runner.run(), msgs };
}

describe('job output', () => {
  it("each step's start is let go before its shell is spawned (the server stamps it on arrival), with no shell started ahead", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kici-flush-'));
    try {
      const msgs: AgentMessage[] = [];
      const flushes: { last: AgentMessage | undefined; stepRan: boolean[] }[] = [];
      const ran = (i: number) => existsSync(join(dir, `step-${i}`));
      const runner = new JobRunner({
        job: {
          id: 'job-f',
          runId: 'run-1',
          name: 'unit',
          env: {},
          steps: [0, 1].map((i) => ({ name: `s${i}`, run: `touch ${join(dir, `step-${i}`)}` })),
        },
        send: (m) => msgs.push(m),
        flush: () => flushes.push({ last: msgs.at(-1), stepRan: [ran(0), ran(1)] }),
      });
      expect(await runner.run()).toBe('succeeded');
      expect(flushes.map((f) => f.last)).toEqual([
        { type: 'step.started', jobId: 'job-f', idx: 0, name: 's0' },
        { type: 'step.started', jobId: 'job-f', idx: 1, name: 's1' },
      ]);
      // Each flush came before its own step ran (and after the one before it).
      expect(flushes.map((f) => f.stepRan)).toEqual([
        [false, false],
        [true, false],
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('control characters: every log frame stays under the limit, and nothing is lost', async () => {
    const { result, msgs } = await runJob("head -c 3000000 /dev/zero | tr '\\0' '\\1'");
    expect(result).toBe('succeeded');
    const logs = msgs.filter((m) => m.type === 'log');
    expect(logs.length).toBeGreaterThan(1);
    for (const m of logs) expect(Buffer.byteLength(JSON.stringify(m))).toBeLessThanOrEqual(MAX_FRAME_BYTES);
    const chars = logs.flatMap((m) => m.lines).reduce((n, l) => n + l.length, 0);
    expect(chars).toBe(3_000_000);
  });

  it('while the link is congested, output is not read (the step waits), and none is lost', async () => {
    const started = Date.now();
    const congestedMs = 800;
    let readDuringCongestion = 0;
    let total = 0;
    const runner = new JobRunner({
      job: {
        id: 'job-2',
        runId: 'run-1',
        name: 'unit',
        env: {},
        steps: [{ name: 's', run: "head -c 6000000 /dev/zero | tr '\\0' 'a'" }],
      },
      send: (m) => {
        if (m.type !== 'log') return;
        const n = m.lines.reduce((sum, l) => sum + l.length, 0);
        total += n;
        if (Date.now() - started < congestedMs) readDuringCongestion += n;
      },
      congested: () => Date.now() - started < congestedMs,
    });
    expect(await runner.run()).toBe('succeeded');
    expect(total).toBe(6_000_000);
    // One batch (about 1 MiB) and what the pipes buffer, not the whole flood.
    expect(readDuringCongestion).toBeLessThan(1_500_000);
  });

  it('lines longer than the cut come in pieces, never splitting a surrogate pair', async () => {
    const s = new PassThrough();
    const got: string[] = [];
    onLines(s, (l) => got.push(l));
    const long = 'x'.repeat(MAX_LINE_CHARS - 1) + '😀' + 'y'.repeat(10);
    s.end(`${long}\nshort\npartial`);
    await new Promise((r) => s.on('close', r));
    expect(got).toEqual(['x'.repeat(MAX_LINE_CHARS - 1), '😀' + 'y'.repeat(10), 'short', 'partial']);
  });

  it('a destroyed stream still hands on its last partial line', async () => {
    const s = new PassThrough();
    const got: string[] = [];
    onLines(s, (l) => got.push(l));
    s.write('no newline yet');
    await new Promise((r) => setImmediate(r));
    s.destroy();
    await new Promise((r) => s.on('close', r));
    expect(got).toEqual(['no newline yet']);
  });
});
