/**
 * 1,000 randomly mutated config files: each must load to a valid config or to problems
 * that each name a file; never an exception, never a hang.
 */
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadScalerConfigForPeople, type PeopleLoadResult } from '../../../src/config/index.js';
import { fileWith, minimalEntry, tempDir } from './fixtures.js';
import { mutateObject, mutateText, pick, rngFrom, serialize, type Json } from './fuzz-mutations.js';

const RUNS = 1000;
const CASE_TIMEOUT_MS = 2000;

const example = fileURLToPath(new URL('../../../examples/scalers.yaml', import.meta.url));

function seeds(exampleDoc: Json): Json[] {
  return [
    exampleDoc,
    fileWith(
      minimalEntry('container'),
      minimalEntry('bare-metal'),
      minimalEntry('firecracker'),
      minimalEntry('event'),
    ) as Json,
    {
      ...fileWith({ ...minimalEntry('container'), machinePool: 'p', warmPool: { enabled: true, size: 1 } }),
      machinePools: [{ name: 'p', cap: { maxCpu: 4, maxMemory: '8g' } }],
    } as Json,
    {
      ...fileWith({
        ...minimalEntry('bare-metal'),
        platform: { os: 'macos', arch: 'arm64' },
        mandatoryLabels: ['xcode'],
        labelSets: [
          { labels: ['xcode', 'macos'], binaryPath: '/a', resources: { limits: { cpus: 2, memory: '2g' } } },
        ],
      }),
      firecracker: {},
    } as Json,
  ];
}

interface Case {
  files: Map<string, string>;
  dir?: string;
}

function buildCase(seed: number, root: string, exampleText: string, exampleDoc: Json): Case {
  const rng = rngFrom(seed);
  const main = join(root, 'scalers.yaml');
  const dir = join(root, 'scalers.d');
  const files = new Map<string, string>();
  const base = rng() < 0.15 ? null : pick(rng, seeds(exampleDoc));
  if (base === null) {
    files.set(main, mutateText(exampleText, rng));
    return { files };
  }
  let mainDoc: Json = structuredClone(base);
  const useDir = rng() < 0.4;
  const dropIns: [string, Json][] = [];
  if (
    useDir &&
    mainDoc &&
    typeof mainDoc === 'object' &&
    !Array.isArray(mainDoc) &&
    Array.isArray(mainDoc.scalers)
  ) {
    const scalers = mainDoc.scalers;
    const cut = Math.floor(rng() * (scalers.length + 1));
    dropIns.push([join(dir, '50-split.yaml'), { scalers: scalers.slice(cut) }]);
    mainDoc = { ...mainDoc, scalers: scalers.slice(0, cut) };
    if (rng() < 0.3)
      dropIns.push([
        join(dir, '10-extra.yml'),
        pick<Json>(rng, [
          { version: 3 },
          [],
          'text',
          null,
          { scalers: [minimalEntry('event', 'extra') as Json] },
        ]),
      ]);
  }
  const docs: [string, Json][] = [[main, mainDoc], ...dropIns];
  const victim = Math.floor(rng() * docs.length);
  docs.forEach(([path, doc], n) => {
    let text: string;
    if (n !== victim) text = serialize(doc, rng);
    else if (rng() < 0.6) text = serialize(mutateObject(doc, rng), rng);
    else text = mutateText(serialize(doc, rng), rng);
    files.set(path, text);
  });
  return useDir ? { files, dir } : { files };
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`load did not finish within ${ms} ms (hang)`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

describe('config fuzz', () => {
  let root: string;
  let cleanup: () => Promise<void>;
  let exampleText: string;
  let exampleDoc: Json;
  beforeAll(async () => {
    ({ dir: root, cleanup } = await tempDir('kici-fuzz-'));
    exampleText = await readFile(example, 'utf8');
    exampleDoc = parse(exampleText) as Json;
  });
  afterAll(async () => cleanup());

  it(`${RUNS} mutated configs end valid or with clear problems`, async () => {
    const outcomes = { ok: 0, invalid: 0 };
    await fc.assert(
      fc.asyncProperty(fc.nat(), async (seed) => {
        await rm(root, { recursive: true, force: true });
        await mkdir(join(root, 'scalers.d'), { recursive: true });
        const c = buildCase(seed, root, exampleText, exampleDoc);
        for (const [path, text] of c.files) await writeFile(path, text);
        const result: PeopleLoadResult = await withTimeout(
          loadScalerConfigForPeople(join(root, 'scalers.yaml'), c.dir),
          CASE_TIMEOUT_MS,
        );
        if (result.ok) {
          outcomes.ok++;
          expect(result.config.version).toBe(1);
          for (const w of result.warnings) expect(typeof w).toBe('string');
          return;
        }
        outcomes.invalid++;
        if (process.env.KICI_FUZZ_VERBOSE) console.log(result.problems.join('\n'));
        expect(result.problems.length).toBeGreaterThan(0);
        const named = [...c.files.keys(), ...(c.dir ? [c.dir] : [])];
        for (const line of result.problems) {
          expect(typeof line).toBe('string');
          expect(line).not.toContain('\n    at ');
          expect(
            named.some((f) => line.startsWith(`${f}: `)),
            `problem does not name a file: ${line}`,
          ).toBe(true);
          expect(line.length).toBeGreaterThan(named[0]!.length + 3);
        }
      }),
      { numRuns: RUNS, seed: Number(process.env.KICI_FUZZ_SEED ?? 20240611), endOnFailure: true },
    );
    if (process.env.KICI_FUZZ_VERBOSE) console.log(outcomes);
    // The mutations must exercise both outcomes, or the test proves little.
    expect(outcomes.ok).toBeGreaterThan(RUNS * 0.03);
    expect(outcomes.invalid).toBeGreaterThan(RUNS * 0.5);
  }, 60_000);
});
