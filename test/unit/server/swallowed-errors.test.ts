import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Metrics } from '../../../src/server/metrics.js';
import { swallow } from '../../../src/util/swallowed-errors.js';

describe('swallowed errors', () => {
  it('are logged with their site and context, and counted in kici_orch_swallowed_errors_total', async () => {
    const lines: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        lines.push(JSON.parse(String(chunk)));
        done();
      },
    });
    const log = pino({ level: 'info' }, sink);
    const handler = swallow(log, 'test.site', { jobId: 'job-1' });
    await Promise.reject(new Error('disk full')).catch(handler);
    await Promise.reject(new Error('disk full')).catch(handler);
    expect(lines[0]).toMatchObject({ level: 40, site: 'test.site', jobId: 'job-1', err: 'disk full' });
    const text = await new Metrics().registry.metrics();
    expect(text).toMatch(/kici_orch_swallowed_errors_total\{site="test.site"\} 2/);
  });
});
