import { Writable } from 'node:stream';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { agentLineForJob, logAgentLine } from '../../../src/util/agent-output.js';
import { formatText, jsonLineToText, logRecord, parseLogFormat } from '../../../src/util/log-format.js';
import { createLogger } from '../../../src/util/logger.js';

function capture(format?: 'json' | 'text') {
  const out: string[] = [];
  const destination = new Writable({
    write(chunk, _enc, done) {
      out.push(...String(chunk).split('\n').filter(Boolean));
      done();
    },
  });
  return { out, log: createLogger({ destination, ...(format ? { format } : {}) }) };
}

describe('one log shape for the orchestrator and its agents', () => {
  it("an agent's record has the keys pino writes for the orchestrator", async () => {
    const { out, log } = capture();
    log.info({ agentId: 'a1' }, 'hello');
    await new Promise((r) => setImmediate(r));
    const ours = JSON.parse(out[0]!) as Record<string, unknown>;
    const agent = logRecord('kici-agent', 'info', 'hello', { agentId: 'a1' });
    expect(Object.keys(agent).sort()).toEqual(Object.keys(ours).sort());
    expect(agent.level).toBe(ours.level);
  });

  it('carries an agent JSON line as fields at its level, never as an escaped string', async () => {
    const { out, log } = capture();
    const line = JSON.stringify(
      logRecord('kici-agent', 'warn', 'connection lost', { agentId: 'a1', code: 1006 }, 5),
    );
    logAgentLine(log, { agentId: 'a1', stream: 'stderr', logsSource: 'bare-metal' }, line);
    logAgentLine(log, { agentId: 'a1', stream: 'stderr' }, 'Segmentation fault {oops');
    await new Promise((r) => setImmediate(r));
    const [rec, raw] = out.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(rec).toMatchObject({
      level: 40,
      msg: 'agent output',
      agentMsg: 'connection lost',
      agentTime: 5,
      code: 1006,
      agentId: 'a1',
      stream: 'stderr',
      service: 'kici-orchestrator',
    });
    expect(out[0]).not.toContain('\\"');
    expect(raw).toMatchObject({ level: 30, msg: 'agent output', line: 'Segmentation fault {oops' });
  });

  it("puts an agent's record in its job's log as readable text, not as JSON in a string", () => {
    const line = JSON.stringify(logRecord('kici-agent', 'warn', 'connection lost', { code: 1006 }, 5));
    expect(agentLineForJob('stderr', line)).toBe('[stderr] WARN  kici-agent: connection lost code=1006');
    expect(agentLineForJob('stdout', 'plain {text')).toBe('[stdout] plain {text');
  });

  it('renders text for people: time, level, service, message, then fields', async () => {
    const { out, log } = capture('text');
    log.warn({ jobId: 'j 1', n: 2 }, 'job waits');
    await new Promise((r) => setImmediate(r));
    expect(out[0]).toMatch(
      /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARN {2}kici-orchestrator: job waits jobId="j 1" n=2$/,
    );
    expect(jsonLineToText('not json')).toBe('not json');
  });

  it('text is one line for any message and fields', () => {
    const key = fc.stringMatching(/^[a-zA-Z_][a-zA-Z0-9_]{0,8}$/);
    fc.assert(
      fc.property(fc.string(), fc.dictionary(key, fc.oneof(fc.string(), fc.integer())), (msg, fields) => {
        expect(formatText(logRecord('kici-agent', 'info', msg, fields)).split('\n')).toHaveLength(1);
      }),
    );
  });

  it('accepts json and text, and names the flag and the variable for anything else', () => {
    expect(parseLogFormat(undefined)).toBe('json');
    expect(parseLogFormat('text')).toBe('text');
    expect(() => parseLogFormat('pretty')).toThrow(/--log-format \(or KICI_LOG_FORMAT\).*"pretty"/);
  });
});
