import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadScalerConfigForPeople } from '../../../src/config/index.js';
import { MAX_CONFIG_FILE_BYTES, MAX_KEYS_PER_MAPPING, shapeProblem } from '../../../src/config/size-caps.js';

/** A config far larger than any real one is refused with one clear line, before it is validated. */

let dir = '';
const HEAD = [
  'version: 1',
  'scalers:',
  '  - name: a',
  '    type: bare-metal',
  '    maxAgents: 1',
  '    labelSets:',
  '      - labels: [linux]',
  '        binaryPath: /bin/true',
];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-size-caps-'));
});
afterAll(async () => rm(dir, { recursive: true, force: true }));

async function load(name: string, lines: string[]) {
  const file = join(dir, name);
  await writeFile(file, lines.join('\n') + '\n');
  // Measured on the event loop itself: a timer due at once fires only when the loader yields.
  let longestStall = 0;
  let last = performance.now();
  const tick = setInterval(() => {
    const now = performance.now();
    longestStall = Math.max(longestStall, now - last);
    last = now;
  }, 1);
  const res = await loadScalerConfigForPeople(file);
  clearInterval(tick);
  longestStall = Math.max(longestStall, performance.now() - last);
  return { file, res, longestStall };
}

describe('config size caps', () => {
  it('30,000 keys in one scaler: refused in one line naming the mapping, without a long stall', async () => {
    const keys = Array.from({ length: 30_000 }, (_, i) => `    k${i}: ${i}`);
    const { file, res, longestStall } = await load('wide.yaml', [...HEAD, ...keys]);
    expect(res.ok).toBe(false);
    if (res.ok) return;
    expect(res.problems).toEqual([
      `${file}: scalers[0]: 30004 keys; a mapping in a scaler config has at most ${MAX_KEYS_PER_MAPPING}`,
    ]);
    // Before the cap this took over a minute on one core; parsing alone is a fraction of a second.
    expect(longestStall).toBeLessThan(3000);
  });

  it('a file over the size cap is refused before it is parsed', async () => {
    const filler = '#'.repeat(1023);
    const lines = [...HEAD, ...Array.from({ length: MAX_CONFIG_FILE_BYTES / 1024 + 1 }, () => filler)];
    const { file, res } = await load('long.yaml', lines);
    expect(res.ok).toBe(false);
    if (!res.ok)
      expect(res.problems[0]).toMatch(new RegExp(`^${file}: \\d+ bytes; a config file may be at most`));
  });

  it('the bound is exact: 256 keys pass the shape check, 257 do not', () => {
    const mapping = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, i]));
    expect(shapeProblem('f', { env: mapping(MAX_KEYS_PER_MAPPING) })).toBeUndefined();
    expect(shapeProblem('f', { env: mapping(MAX_KEYS_PER_MAPPING + 1) })).toBe(
      `f: env: ${MAX_KEYS_PER_MAPPING + 1} keys; a mapping in a scaler config has at most ${MAX_KEYS_PER_MAPPING}`,
    );
  });

  it('a real-sized config is untouched', async () => {
    const { res } = await load('ok.yaml', HEAD);
    expect(res.ok).toBe(true);
  });
});
