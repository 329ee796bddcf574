import { lstat, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { TestOrchestrator } from './orchestrator.js';

/**
 * Every read-only API answer a viewer could ask for about these jobs and events, as text: a test
 * looks in it for a value no answer may carry.
 */
export async function apiAnswersText(
  t: TestOrchestrator,
  ids: { jobs?: string[]; runs?: string[]; events?: string[] } = {},
): Promise<string> {
  const paths = [
    '/api/v1/jobs?limit=10000',
    '/api/v1/events',
    '/api/v1/agents',
    '/api/v1/scaler/status',
    '/api/v1/cluster/status',
    ...(ids.jobs ?? []).flatMap((j) => [
      `/api/v1/jobs/${j}`,
      `/api/v1/jobs/${j}/logs`,
      `/api/v1/scaler/explain/${j}`,
    ]),
    ...(ids.runs ?? []).map((r) => `/api/v1/runs/${r}`),
    ...(ids.events ?? []).map((e) => `/api/v1/events/${e}`),
  ];
  const parts: string[] = [];
  for (const p of paths) {
    const res = await t.api('GET', p);
    parts.push(`${p} ${res.status} ${JSON.stringify(res.body)}`);
  }
  return parts.join('\n');
}

/** Trees no test process writes a secret into, and too large to read on every run. */
const NEVER_WRITTEN = new Set(['node_modules', '.git']);

/**
 * Files under `root` (not below `skip`) changed since `sinceMs` whose content holds `needle`.
 * Older files cannot hold a value made during the test; larger or unreadable ones are passed over.
 */
export async function filesHolding(
  root: string,
  needle: string,
  sinceMs: number,
  skip: readonly string[] = [],
  maxBytes = 4 * 1024 * 1024,
): Promise<string[]> {
  const found: string[] = [];
  const walk = async (dir: string, depth: number): Promise<void> => {
    if (depth > 8) return;
    const names = await readdir(dir).catch(() => [] as string[]);
    for (const name of names) {
      const path = join(dir, name);
      if (NEVER_WRITTEN.has(name) || skip.some((s) => path === s || path.startsWith(`${s}/`))) continue;
      const st = await lstat(path).catch(() => undefined);
      if (!st) continue;
      if (st.isDirectory()) await walk(path, depth + 1);
      else if (st.isFile() && st.size <= maxBytes && st.mtimeMs >= sinceMs) {
        const text = await readFile(path).catch(() => undefined);
        if (text?.includes(needle)) found.push(path);
      }
    }
  };
  await walk(root, 0);
  return found;
}
