import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { ADMIN_BIN, bareMetalConfig, runNode } from '../helpers/orchestrator.js';

let dir: string | undefined;
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

describe('kici-admin scaler simulate (offline: no server)', () => {
  it('compares two configs over a hand-written trace, as a table, JSON and an SVG chart', async () => {
    dir = await mkdtemp(join(tmpdir(), 'kici-sim-'));
    const cur = join(dir, 'current.yaml');
    const prop = join(dir, 'proposed.yaml');
    const trace = join(dir, 'jobs.jsonl');
    const svg = join(dir, 'chart.svg');
    await writeFile(cur, stringify(bareMetalConfig({ maxAgents: 1 })));
    await writeFile(prop, stringify(bareMetalConfig({ maxAgents: 4 })));
    const lines = Array.from({ length: 8 }, (_, i) =>
      JSON.stringify({ submit: `2026-12-01T09:00:0${i}Z`, labels: ['linux', 'small'], runMs: 5000 }),
    );
    await writeFile(trace, `# eight builds\n${lines.join('\n')}\n`);
    const base = ['scaler', 'simulate', '--config', prop, '--against', cur, '--trace', trace];
    const text = await runNode([ADMIN_BIN, ...base, '--spawn-ms', 'bare-metal=1000', '--svg', svg]).exited;
    expect(text.stderr).toBe('');
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/bm\/linux,small\s+WAIT P95\s+\d+\s+\d+\s+-\d+/);
    expect(await readFile(svg, 'utf8')).toMatch(/^<svg[\s\S]*polyline/);
    const json = await runNode([ADMIN_BIN, ...base, '--spawn-ms', 'bare-metal=1000', '--json']).exited;
    const out = JSON.parse(json.stdout) as {
      proposed: { pools: { key: string; waitP95Ms: number; peakAgents: number }[] };
      current: { pools: { key: string; waitP95Ms: number; peakAgents: number }[] };
    };
    const pick = (r: typeof out.current) => r.pools.find((p) => p.key === 'bm/linux,small')!;
    expect(pick(out.current).peakAgents).toBe(1);
    expect(pick(out.proposed).peakAgents).toBe(4);
    expect(pick(out.proposed).waitP95Ms).toBeLessThan(pick(out.current).waitP95Ms);
    // The hand-over every job pays adds to every wait (and to the wait of a job queued behind it).
    const handed = await runNode([
      ADMIN_BIN,
      ...base,
      '--spawn-ms',
      'bare-metal=1000',
      '--dispatch-ms',
      '250',
      '--json',
    ]).exited;
    const withDispatch = JSON.parse(handed.stdout) as typeof out;
    expect(pick(withDispatch.proposed).waitP95Ms).toBeGreaterThanOrEqual(pick(out.proposed).waitP95Ms + 250);
    const slow = await runNode([ADMIN_BIN, ...base, '--spawn-ms', 'bare-metal=1', '--dispatch-ms', 'soon'])
      .exited;
    expect(slow.code).not.toBe(0);
    expect(slow.stderr).toMatch(/--dispatch-ms: "soon" is not a number of ms/);
    // Without a spawn time the command says which flag to pass; a bad trace line is named.
    const noSpawn = await runNode([ADMIN_BIN, ...base]).exited;
    expect(noSpawn.code).toBe(1);
    expect(noSpawn.stderr).toMatch(/--spawn-ms bare-metal=<ms>/);
    await writeFile(trace, `${lines[0]}\n{"submit":"x","labels":["a"]}\n`);
    const bad = await runNode([ADMIN_BIN, ...base, '--spawn-ms', 'bare-metal=1']).exited;
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/jobs\.jsonl:2: field "submit"/);
    expect(bad.stderr).not.toMatch(/\n\s+at /);
  }, 60_000);
});
