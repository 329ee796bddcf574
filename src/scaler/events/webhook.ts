import { createHmac } from 'node:crypto';

/** Headers a receiver verifies (docs/events.md). */
export const SIGNATURE_HEADER = 'x-kici-signature';
export const TIMESTAMP_HEADER = 'x-kici-timestamp';
export const EVENT_ID_HEADER = 'x-kici-event-id';
export const EVENT_NAME_HEADER = 'x-kici-event';

/** `sha256=` + hex HMAC-SHA256 of `<timestamp>.<raw body>` under the shared secret. */
export function signWebhook(secret: string, timestamp: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
}

export interface WebhookRetryPolicy {
  /** First retry after about this long; each next one waits twice as long, up to maxDelayMs. */
  baseDelayMs: number;
  maxDelayMs: number;
  /** No attempt starts later than this after the first one: the delivery is then given up. */
  giveUpAfterMs: number;
  /** One attempt's time limit. */
  attemptTimeoutMs: number;
}

export const DEFAULT_WEBHOOK_RETRY: WebhookRetryPolicy = {
  baseDelayMs: 1_000,
  maxDelayMs: 60_000,
  giveUpAfterMs: 15 * 60_000,
  attemptTimeoutMs: 10_000,
};

/** Delay before retry `n` (1-based): exponential, with jitter in [50 %, 100 %] so receivers are not stampeded. */
export function retryDelayMs(policy: WebhookRetryPolicy, n: number, random = Math.random): number {
  const full = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.min(n - 1, 30));
  return Math.round(full * (0.5 + random() * 0.5));
}

export interface WebhookOutcome {
  delivered: boolean;
  attempts: number;
  lastError: string | null;
}

/**
 * POST `body` until a 2xx or the give-up time. `onAttempt` is told each failure as it happens
 * (the delivery record shows progress while retries go on). A stop signal ends the loop early.
 */
export async function deliverWebhook(
  url: string,
  spec: { secret: string; eventId: string; eventName: string; body: string },
  policy: WebhookRetryPolicy,
  hooks: {
    onAttempt(attempts: number, error: string | null): Promise<void> | void;
    stop?: AbortSignal;
    now?: () => number;
  },
): Promise<WebhookOutcome> {
  const now = hooks.now ?? Date.now;
  const started = now();
  let attempts = 0;
  let lastError: string | null = null;
  for (;;) {
    attempts++;
    const timestamp = String(Math.floor(now() / 1000));
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          [SIGNATURE_HEADER]: signWebhook(spec.secret, timestamp, spec.body),
          [TIMESTAMP_HEADER]: timestamp,
          [EVENT_ID_HEADER]: spec.eventId,
          [EVENT_NAME_HEADER]: spec.eventName,
        },
        body: spec.body,
        signal: AbortSignal.timeout(policy.attemptTimeoutMs),
      });
      // The receiver's body is not needed; draining it frees the connection. A body cut off half-way
      // changes nothing: the status line already decided the attempt, and fetch does not reuse a
      // connection that broke.
      await res.arrayBuffer().catch(() => undefined);
      if (res.ok) {
        await hooks.onAttempt(attempts, null);
        return { delivered: true, attempts, lastError };
      }
      lastError = `HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ''}`;
    } catch (err) {
      const cause = (err as { cause?: { code?: string } }).cause?.code;
      lastError = `${(err as Error).name === 'TimeoutError' ? 'timed out' : (err as Error).message}${cause ? ` (${cause})` : ''}`;
    }
    await hooks.onAttempt(attempts, lastError);
    const delay = retryDelayMs(policy, attempts);
    if (hooks.stop?.aborted || now() + delay - started > policy.giveUpAfterMs)
      return { delivered: false, attempts, lastError };
    await new Promise<void>((r) => {
      const t = setTimeout(r, delay);
      hooks.stop?.addEventListener('abort', () => (clearTimeout(t), r()), { once: true });
    });
  }
}
