import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MAX_RELOAD_TIMEOUT_S, parseReloadRequest } from '../../../src/server/reload-request.js';

describe('the scaler reload query', () => {
  it('takes nothing as: every instance, the default wait', () => {
    expect(parseReloadRequest({})).toEqual({ ok: true, request: { single: false } });
  });

  it('takes single and a timeout in whole seconds', () => {
    expect(parseReloadRequest({ single: 'true', timeout: '5' })).toEqual({
      ok: true,
      request: { single: true, timeoutMs: 5000 },
    });
    expect(parseReloadRequest({ single: 'false', timeout: String(MAX_RELOAD_TIMEOUT_S) })).toEqual({
      ok: true,
      request: { single: false, timeoutMs: MAX_RELOAD_TIMEOUT_S * 1000 },
    });
  });

  it('accepts exactly the whole seconds from 1 to the maximum, and names the field otherwise', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.integer({ min: -10, max: 2 * MAX_RELOAD_TIMEOUT_S }).map(String), fc.string()),
        (t) => {
          const r = parseReloadRequest({ timeout: t });
          const good = /^\d+$/.test(t) && Number(t) >= 1 && Number(t) <= MAX_RELOAD_TIMEOUT_S;
          expect(r.ok).toBe(good);
          if (r.ok) expect(r.request.timeoutMs).toBe(Number(t) * 1000);
          else
            expect(r.problems).toEqual([
              expect.stringMatching(/^timeout: expected whole seconds from 1 to 600/),
            ]);
        },
      ),
    );
    for (const t of ['0', '1.5', '601', ' 5', '5s', '', '1e2'])
      expect(parseReloadRequest({ timeout: t }).ok, t).toBe(false);
  });

  it('refuses a single that is not true or false, with every problem at once', () => {
    const r = parseReloadRequest({ single: 'yes', timeout: 'soon' });
    expect(r).toEqual({
      ok: false,
      problems: [
        'single: expected true or false, got "yes"',
        'timeout: expected whole seconds from 1 to 600, got "soon"',
      ],
    });
  });
});
