/** Pure parts of scale-event delivery: retry timing, the signature, and the provisioning run. */
import { createHmac } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { provisioningRun } from '../../../src/scaler/events/provisioning-run.js';
import { DEFAULT_WEBHOOK_RETRY, retryDelayMs, signWebhook } from '../../../src/scaler/events/webhook.js';

describe('webhook retry delay', () => {
  it('property: exponential from the base, capped, jittered into [50 %, 100 %] of the full delay', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 5_000 }),
        fc.integer({ min: 1, max: 120_000 }),
        fc.integer({ min: 1, max: 60 }),
        fc.double({ min: 0, max: 0.999999, noNaN: true }),
        (base, max, n, r) => {
          const policy = { ...DEFAULT_WEBHOOK_RETRY, baseDelayMs: base, maxDelayMs: max };
          const full = Math.min(max, base * 2 ** Math.min(n - 1, 30));
          const d = retryDelayMs(policy, n, () => r);
          expect(d).toBeGreaterThanOrEqual(Math.floor(full * 0.5));
          expect(d).toBeLessThanOrEqual(Math.ceil(full));
          // Never shorter for a later retry, at the same jitter.
          expect(retryDelayMs(policy, n + 1, () => r)).toBeGreaterThanOrEqual(d);
        },
      ),
    );
  });
});

describe('webhook signature', () => {
  it('is sha256= and the hex HMAC of "<timestamp>.<body>"', () => {
    const body = JSON.stringify({ eventId: 'e1', event: 'kici.scaler.scale-up', payload: {} });
    const want = createHmac('sha256', 's3cret').update(`1700000000.${body}`).digest('hex');
    expect(signWebhook('s3cret', '1700000000', body)).toBe(`sha256=${want}`);
    expect(signWebhook('s3cret', '1700000001', body)).not.toBe(`sha256=${want}`);
  });
});

describe('provisioning run', () => {
  const payload = { scalerName: 'cloud', agentId: 'scaler-event-1', reason: 'idle' as const, requestId: 'r' };

  it('keeps every job off its own scaler, gives it the event, and writes the payload first', () => {
    const run = provisioningRun(
      {
        name: 'p',
        jobs: {
          a: { runsOn: ['prov'], steps: [{ run: 'boot' }], role: 'execution', excludeLabels: ['gpu'] },
          b: { runsOn: ['prov'], steps: [{ run: 'x' }], role: 'execution', env: { KEEP: '1' } },
        },
      },
      'kici.scaler.scale-down',
      'ev-1',
      payload,
    );
    for (const job of Object.values(run.jobs)) {
      expect(job.excludeLabels).toContain('kici:scaler:cloud');
      expect(job.env).toMatchObject({
        KICI_EVENT_NAME: 'kici.scaler.scale-down',
        KICI_EVENT_ID: 'ev-1',
        KICI_EVENT_PATH: '/tmp/kici-event-ev-1.json',
      });
      expect(JSON.parse(job.env!.KICI_EVENT_PAYLOAD!)).toEqual(payload);
      expect(job.steps[0]!.run).toContain('"$KICI_EVENT_PATH"');
    }
    expect(run.jobs.a!.excludeLabels).toEqual(['gpu', 'kici:scaler:cloud']);
    expect(run.jobs.b!.env!.KEEP).toBe('1');
    expect(run.jobs.a!.steps.slice(1)).toEqual([{ run: 'boot' }]);
  });
});
