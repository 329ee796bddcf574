/**
 * A real bare-metal agent's own log lines reach the orchestrator's log as fields of one record
 * (`agentMsg`, `agentId`, `logsSource`, `stream`, the agent's level), never as a JSON string inside
 * a string, and reach its job's log as readable text.
 */
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/util/logger.js';
import { bareMetalConfig, startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';

let t: TestOrchestrator;
const raw: string[] = [];
let jobId: string;

beforeAll(async () => {
  const destination = new Writable({
    write(chunk, _enc, done) {
      raw.push(...String(chunk).split('\n').filter(Boolean));
      done();
    },
  });
  t = await startTestOrchestrator({ config: bareMetalConfig(), logger: createLogger({ destination }) });
  const run = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
    jobs: { build: { runsOn: ['linux', 'small'], steps: [{ run: 'echo built' }] } },
  });
  jobId = run.body.jobs[0]!.id;
  expect((await t.waitForJob(jobId)).state).toBe('succeeded');
});

afterAll(async () => {
  await t?.stop();
});

describe("an agent's output in the orchestrator's log and the job's log", () => {
  it('is one record per line with the agent fields, never escaped JSON', () => {
    const lines = raw.filter((l) => l.includes('"agent output"'));
    const records = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    const agents = records.filter((r) => typeof r.agentMsg === 'string');
    expect(agents.length, raw.slice(-20).join('\n')).toBeGreaterThan(0);
    for (const r of agents)
      expect(r).toMatchObject({
        msg: 'agent output',
        service: 'kici-orchestrator',
        logsSource: 'bare-metal',
        agentId: expect.stringMatching(/^scaler-bare-metal-/),
        stream: expect.stringMatching(/^std(out|err)$/),
        level: expect.any(Number),
      });
    expect(agents.map((r) => r.agentMsg)).toContainEqual(expect.stringMatching(/^registered as /));
    // Nothing the agent wrote as JSON is kept as a string.
    for (const r of records) if (typeof r.line === 'string') expect(r.line.startsWith('{')).toBe(false);
    for (const l of lines) expect(l).not.toContain('\\"');
  });

  it("is readable text in the job's log", async () => {
    const logs = await t.api<{ lines: { stream: string; line: string }[] }>(
      'GET',
      `/api/v1/jobs/${jobId}/logs`,
    );
    const output = logs.body.lines.filter((l) => l.line.startsWith('agent.output: '));
    expect(output.length).toBeGreaterThan(0);
    for (const l of output) expect(l.line).not.toMatch(/\] \{/);
    expect(output.map((l) => l.line)).toContainEqual(
      expect.stringMatching(/^agent\.output: \[std(out|err)\] INFO {2}kici-agent: registered as /),
    );
  });
});
