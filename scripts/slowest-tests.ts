/**
 * `node scripts/slowest-tests.ts <dir> [n]`: the n slowest test files across the vitest JSON reports
 * in <dir> (one per suite run), so a CI log shows a slow file the day it lands.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

interface FileResult {
  name: string;
  startTime: number;
  endTime: number;
  assertionResults?: unknown[];
}

const [dir, n = '10'] = process.argv.slice(2);
if (!dir) {
  process.stderr.write('usage: slowest-tests.ts <report dir> [n]\n');
  process.exit(2);
}
const rows: { suite: string; file: string; ms: number; tests: number }[] = [];
for (const entry of readdirSync(dir).filter((f) => f.endsWith('.json'))) {
  const report = JSON.parse(readFileSync(join(dir, entry), 'utf8')) as { testResults?: FileResult[] };
  for (const r of report.testResults ?? [])
    rows.push({
      suite: entry.replace(/\.json$/, ''),
      file: relative(process.cwd(), r.name),
      ms: r.endTime - r.startTime,
      tests: r.assertionResults?.length ?? 0,
    });
}
rows.sort((a, b) => b.ms - a.ms);
process.stdout.write(`slowest test files (of ${rows.length}):\n`);
for (const r of rows.slice(0, Number(n)))
  process.stdout.write(
    `  ${(r.ms / 1000).toFixed(1).padStart(7)}s  ${r.file} (${r.tests} tests, ${r.suite})\n`,
  );
