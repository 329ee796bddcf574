/**
 * Mean spawn latency per backend type from a Prometheus exposition of the orchestrator's
 * `kici_orch_spawn_latency_seconds` histogram (decision to registration, as the server measured it).
 */
export function spawnLatencyFromMetrics(text: string): Record<string, number> {
  const sum = new Map<string, number>();
  const count = new Map<string, number>();
  const re = /^kici_orch_spawn_latency_seconds_(sum|count)\{([^}]*)\}\s+([0-9.eE+-]+)$/;
  for (const line of text.split('\n')) {
    const m = re.exec(line.trim());
    if (!m) continue;
    const backend = /backend="([^"]*)"/.exec(m[2]!)?.[1];
    if (!backend) continue;
    const into = m[1] === 'sum' ? sum : count;
    into.set(backend, (into.get(backend) ?? 0) + Number(m[3]));
  }
  const out: Record<string, number> = {};
  for (const [backend, n] of count) {
    if (n > 0) out[backend] = Math.round(((sum.get(backend) ?? 0) / n) * 1000);
  }
  return out;
}
