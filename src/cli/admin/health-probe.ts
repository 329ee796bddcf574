/** Is an orchestrator up and healthy at this URL? Its /healthz must answer and its /readyz say ready. */
import { errorMessage } from '../../util/errors.js';

export type Health = { healthy: true } | { healthy: false; reason: string };

/** Two seconds: an orchestrator stuck on a full disk must not hold up the command that frees it. */
export const HEALTH_PROBE_TIMEOUT_MS = 2_000;

export async function probeHealth(baseUrl: string, timeoutMs = HEALTH_PROBE_TIMEOUT_MS): Promise<Health> {
  const get = async (path: string) => {
    const res = await fetch(`${baseUrl}${path}`, { signal: AbortSignal.timeout(timeoutMs) });
    return { status: res.status, text: await res.text() };
  };
  let live;
  try {
    live = await get('/healthz');
  } catch (err) {
    return { healthy: false, reason: `no answer from ${baseUrl}/healthz (${errorMessage(err)})` };
  }
  if (live.status !== 200)
    return { healthy: false, reason: `${baseUrl}/healthz answered HTTP ${live.status}` };
  let ready;
  try {
    ready = await get('/readyz');
  } catch (err) {
    return { healthy: false, reason: `no answer from ${baseUrl}/readyz (${errorMessage(err)})` };
  }
  if (ready.status === 200) return { healthy: true };
  let why = `HTTP ${ready.status}`;
  try {
    const body = JSON.parse(ready.text) as { status?: unknown; problem?: unknown };
    if (typeof body.status === 'string')
      why = typeof body.problem === 'string' ? `${body.status}: ${body.problem}` : body.status;
  } catch {
    // not JSON: the status code says enough
  }
  return { healthy: false, reason: `${baseUrl}/readyz says it is not ready (${why})` };
}
