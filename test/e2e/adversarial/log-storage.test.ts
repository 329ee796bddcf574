import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bystanderJob, expectHealthy } from '../../helpers/adversarial.js';
import { bareMetalConfig, startTestOrchestrator, type TestOrchestrator } from '../../helpers/orchestrator.js';

/**
 * Job output that used to cost other jobs their logs or fill the disk: a NUL byte, and far more
 * output than the per-job cap.
 */

const CAP = 64 * 1024;
let t: TestOrchestrator;
let bystander: Awaited<ReturnType<typeof bystanderJob>>;
const savedCap = process.env.KICI_JOB_LOG_MAX_BYTES;

interface Line {
  stream: string;
  line: string;
}

beforeAll(async () => {
  process.env.KICI_JOB_LOG_MAX_BYTES = String(CAP);
  t = await startTestOrchestrator({ config: bareMetalConfig() });
  bystander = await bystanderJob(t, ['linux', 'small']);
});
afterAll(async () => {
  await bystander.check();
  await expectHealthy(t);
  await t.stop();
  if (savedCap === undefined) delete process.env.KICI_JOB_LOG_MAX_BYTES;
  else process.env.KICI_JOB_LOG_MAX_BYTES = savedCap;
});

async function submit(jobs: Record<string, string>): Promise<Record<string, string>> {
  const res = await t.api<{ jobs: { id: string; name: string }[] }>('POST', '/api/v1/runs', {
    jobs: Object.fromEntries(
      Object.entries(jobs).map(([name, run]) => [name, { runsOn: ['linux', 'small'], steps: [{ run }] }]),
    ),
  });
  expect(res.status).toBe(201);
  return Object.fromEntries(res.body.jobs.map((j) => [j.name, j.id]));
}

async function logsOf(jobId: string) {
  const res = await t.api<{ logTruncated: boolean; lines: Line[] }>('GET', `/api/v1/jobs/${jobId}/logs`);
  expect(res.status).toBe(200);
  return res.body;
}

describe('a NUL byte in one job never loses another job its lines', () => {
  it('two concurrent jobs, one prints a NUL mid-stream: every line of both arrives', async () => {
    const ids = await submit({
      dirty: `for i in $(seq 1 300); do if [ $i = 150 ]; then printf 'nul\\000here\\n'; fi; echo "dirty $i"; sleep 0.005; done`,
      clean: 'for i in $(seq 1 300); do echo "clean $i"; sleep 0.005; done',
    });
    const dirty = await t.waitForJob(ids.dirty!);
    const clean = await t.waitForJob(ids.clean!);
    expect(dirty.state).toBe('succeeded');
    expect(clean.state).toBe('succeeded');
    const cleanLines = (await logsOf(ids.clean!)).lines
      .filter((l) => l.stream === 'stdout')
      .map((l) => l.line);
    expect(cleanLines).toEqual(Array.from({ length: 300 }, (_, i) => `clean ${i + 1}`));
    const dirtyLines = (await logsOf(ids.dirty!)).lines
      .filter((l) => l.stream === 'stdout')
      .map((l) => l.line);
    expect(dirtyLines).toHaveLength(301);
    // The NUL is stored as U+FFFD, the replacement character.
    expect(dirtyLines[149]).toBe('nul\uFFFDhere');
    expect(dirtyLines[300]).toBe('dirty 300');
  });
});

describe('a job log over the cap keeps its head and its tail', () => {
  it(`a job printing ~1.2 MB stores at most the ${CAP}-byte cap, marked truncated`, async () => {
    const total = 40_000;
    const ids = await submit({
      chatty: `i=1; while [ $i -le ${total} ]; do echo "chatty line $i of the flood"; i=$((i+1)); done`,
    });
    const job = await t.waitForJob(ids.chatty!);
    expect(job.state).toBe('succeeded');
    const logs = await logsOf(ids.chatty!);
    const stored = logs.lines.reduce((n, l) => n + Buffer.byteLength(l.line) + 1, 0);
    console.log(
      `job printed ${total} lines; stored ${logs.lines.length} lines, ${stored} bytes (cap ${CAP})`,
    );
    expect(stored).toBeLessThanOrEqual(CAP + 1024);
    const out = logs.lines.filter((l) => l.stream === 'stdout').map((l) => l.line);
    expect(out[0]).toBe('chatty line 1 of the flood');
    expect(out.at(-1)).toBe(`chatty line ${total} of the flood`);
    const marker = logs.lines.find((l) => l.stream === 'system' && l.line.startsWith('log truncated:'));
    expect(marker?.line).toMatch(/^log truncated: \d+ lines \(\d+ bytes\) were dropped here/);
    // The marker sits between the head and the tail.
    const at = logs.lines.indexOf(marker!);
    expect(logs.lines[at - 1]!.line).toMatch(/^chatty line \d+ /);
    expect(Number(/line (\d+)/.exec(logs.lines[at + 1]!.line)![1])).toBeGreaterThan(
      Number(/line (\d+)/.exec(logs.lines[at - 1]!.line)![1]) + 1,
    );
    expect(logs.logTruncated).toBe(true);
    const view = await t.api<{ logTruncated: boolean }>('GET', `/api/v1/jobs/${ids.chatty}`);
    expect(view.body.logTruncated).toBe(true);
  });

  it('a job under the cap is stored whole and not marked', async () => {
    const ids = await submit({ quiet: 'for i in $(seq 1 50); do echo "quiet $i"; done' });
    await t.waitForJob(ids.quiet!);
    const logs = await logsOf(ids.quiet!);
    expect(logs.logTruncated).toBe(false);
    expect(logs.lines.filter((l) => l.stream === 'stdout')).toHaveLength(50);
  });
});
