/**
 * The query of `POST /api/v1/scaler/reload`: `single=true` reloads only the instance asked (not its
 * peers), `timeout=<seconds>` is how long it waits for its peers' answers.
 */

/** Longest wait for peers' answers a caller may ask for: ten minutes. */
export const MAX_RELOAD_TIMEOUT_S = 600;

export interface ReloadRequest {
  single: boolean;
  /** Absent: the fan-out's own default. */
  timeoutMs?: number;
}

export function parseReloadRequest(q: {
  single?: string | undefined;
  timeout?: string | undefined;
}): { ok: true; request: ReloadRequest } | { ok: false; problems: string[] } {
  const problems: string[] = [];
  if (q.single !== undefined && q.single !== 'true' && q.single !== 'false')
    problems.push(`single: expected true or false, got ${JSON.stringify(q.single.slice(0, 40))}`);
  let timeoutMs: number | undefined;
  if (q.timeout !== undefined) {
    const n = /^\d+$/.test(q.timeout) ? Number(q.timeout) : NaN;
    if (!(n >= 1 && n <= MAX_RELOAD_TIMEOUT_S))
      problems.push(
        `timeout: expected whole seconds from 1 to ${MAX_RELOAD_TIMEOUT_S}, got ${JSON.stringify(q.timeout.slice(0, 40))}`,
      );
    else timeoutMs = n * 1000;
  }
  if (problems.length) return { ok: false, problems };
  return { ok: true, request: { single: q.single === 'true', ...(timeoutMs ? { timeoutMs } : {}) } };
}
