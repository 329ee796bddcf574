/**
 * Benchmark: job log storage on the embedded database. 20 jobs write interleaved stdout and
 * stderr lines (about 80 bytes each, a build's typical mix) in the LogSink's flush batches of
 * 2,000 lines; reports the lines ingested per second and the bytes the log tables (with their
 * indexes) take per million lines. Runs against the built output (npm run build).
 *
 *   node bench/logs.ts [lines]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type * as storeApi from '../src/store/index.ts';
import type { BenchResult } from './stats.ts';
import { fmt } from './stats.ts';

type StoreModule = typeof storeApi;

const JOBS = 20;
const BATCH = 2_000;

/** A plausible build line: a path, a counter and some words, varied enough not to compress away. */
function lineText(i: number): string {
  const words = ['compiling', 'linking', 'warning: unused', 'PASS', 'ok', 'downloading', 'test'];
  return `[${String(i % 997).padStart(4, '0')}] ${words[i % words.length]} src/module_${i % 331}/file_${(i * 7919) % 10007}.ts (${(i * 31) % 1000} ms)`;
}

export async function benchLogs(total = 300_000): Promise<BenchResult[]> {
  const mod = (await import(new URL('../dist/store/index.js', import.meta.url).href)) as StoreModule;
  const { sql } = await import('kysely');
  const dir = await mkdtemp(join(tmpdir(), 'kici-bench-logs-'));
  const opened = await mod.openDatabase({ dataDir: dir });
  try {
    const store = mod.createStore(opened.db);
    const size = async () => {
      const r = await sql<{ bytes: string }>`
        select coalesce(sum(pg_total_relation_size(c.oid)), 0) as bytes from pg_class c
        where c.relname in ('job_logs', 'job_log_chunks') and c.relkind = 'r'`.execute(opened.db);
      return Number(r.rows[0]!.bytes);
    };
    await sql`checkpoint`.execute(opened.db);
    const before = await size();
    const t0 = Date.now();
    const start = performance.now();
    let bytesIn = 0;
    for (let done = 0; done < total; done += BATCH) {
      const batch = Array.from({ length: Math.min(BATCH, total - done) }, (_, k) => {
        const i = done + k;
        const line = lineText(i);
        bytesIn += line.length;
        return {
          jobId: `j-bench${String(i % JOBS).padStart(5, '0')}`,
          stepIdx: Math.floor(i / 50_000),
          stream: i % 9 === 0 ? 'stderr' : 'stdout',
          line,
          ts: new Date(t0 + Math.floor(i / 20)),
        };
      });
      await store.logs.append(batch);
    }
    const seconds = (performance.now() - start) / 1000;
    await sql`checkpoint`.execute(opened.db);
    const stored = (await size()) - before;
    const perMillion = (stored / total) * 1e6;
    // Read every job back (what `job logs` does) so the format's read cost shows too.
    const readStart = performance.now();
    let read = 0;
    for (let j = 0; j < JOBS; j++) {
      let after: number | undefined;
      for (;;) {
        const rows = await store.logs.list(`j-bench${String(j).padStart(5, '0')}`, after);
        read += rows.length;
        if (rows.length < 10_000) break;
        after = Number(rows[rows.length - 1]!.id);
      }
    }
    const readSeconds = (performance.now() - readStart) / 1000;
    if (read !== total) throw new Error(`read back ${read} of ${total} lines`);
    return [
      {
        name: 'logs: lines ingested per second',
        value: total / seconds,
        unit: 'lines/s',
        target: 'over 20,000 lines/s (per-line rows: about 11,000 here)',
        pass: total / seconds > 20_000,
        detail: `${total} lines (${fmt(bytesIn / total)} bytes each) from ${JOBS} jobs in ${fmt(seconds, 2)} s; read back in ${fmt(readSeconds, 2)} s (${fmt(total / readSeconds / 1000)}k lines/s)`,
      },
      {
        name: 'logs: bytes stored per million lines',
        value: perMillion / 1_048_576,
        unit: 'MiB',
        target: 'under 2 x the raw text',
        pass: perMillion < 2 * (bytesIn / total) * 1e6,
        detail: `${fmt(stored / 1_048_576)} MiB for ${total} lines (raw text ${fmt(((bytesIn / total) * 1e6) / 1_048_576)} MiB per million)`,
      },
    ];
  } finally {
    await opened.close();
    await rm(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`)
  for (const r of await benchLogs(Number(process.argv[2] ?? 300_000)))
    process.stdout.write(`${r.name}: ${fmt(r.value)} ${r.unit}\n  ${r.detail}\n`);
