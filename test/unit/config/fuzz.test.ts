/**
 * 1,000 randomly mutated config files: each must load to a valid config or to problems
 * that each name a file; never an exception, never a hang.
 */
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { loadScalerConfigForPeople, type PeopleLoadResult } from '../../../src/config/index.js';
import { fileWith, minimalEntry, tempDir } from './fixtures.js';

const RUNS = 1000;
const CASE_TIMEOUT_MS = 2000;
type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Path = (string | number)[];

/** Deterministic per-case randomness derived from the fast-check seed. */
function rngFrom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const pick = <T>(rng: () => number, items: readonly T[]): T => items[Math.floor(rng() * items.length)]!;

const JUNK_VALUES: Json[] = [
  null,
  0,
  -1,
  1.5,
  1e308,
  2 ** 53 + 2,
  '',
  ' ',
  'kici:os:linux',
  '2Gi',
  '512m',
  'docker',
  'container',
  true,
  false,
  [],
  {},
  [null],
  { a: 1 },
  'x'.repeat(500),
  '\u0000\u0007',
  'job:',
  'webhook:x',
  '10.0.0.0/33',
  ['linux'],
  { limits: { cpus: 1 } },
  { cpus: 1 },
  { os: 'windows', arch: 'arm64' },
  'all',
  ['all', 'builder'],
];
const JUNK_KEYS = [
  'image',
  'labels',
  'type',
  'cpus',
  'memory',
  'requests',
  'limits',
  'warmPool',
  'platform',
  'machinePool',
  '__proto__',
  'constructor',
  'toString',
  'hasOwnProperty',
  'x y',
  '',
  'scalers',
  'version',
  'labelSets',
  'name',
];
const JUNK_TEXT = [
  ':',
  '-',
  '[',
  ']',
  '{',
  '}',
  '"',
  "'",
  '&a',
  '*a',
  '!tag',
  '%',
  '\t',
  '\n',
  '#',
  '|',
  '>',
  '? ',
  '---\n',
  '\uFEFF',
  '\u0000',
  'é',
  '<<: *x\n',
  ' ',
  '\\',
  ',',
  '@',
  '`',
  '~',
  '0x',
  '.inf',
  '.nan',
];

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

function nodes(value: Json, path: Path = [], out: { path: Path; value: Json }[] = []) {
  out.push({ path, value });
  if (Array.isArray(value)) value.forEach((v, i) => nodes(v, [...path, i], out));
  else if (value && typeof value === 'object')
    for (const k of Object.keys(value)) nodes(value[k]!, [...path, k], out);
  return out;
}

function parentOf(root: Json, path: Path): Json {
  let cur = root;
  for (const key of path.slice(0, -1)) cur = (cur as Record<string | number, Json>)[key]!;
  return cur;
}

function setOwn(target: object, key: string | number, value: Json): void {
  // defineProperty so that "__proto__" becomes a key, as it would from YAML.
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

function mutateObject(doc: Json, rng: () => number): Json {
  const root = structuredClone(doc);
  const ops = 1 + Math.floor(rng() * 3);
  let current: Json = root;
  for (let n = 0; n < ops; n++) {
    const all = nodes(current);
    const target = pick(rng, all);
    const op = pick(rng, [
      'delete',
      'replace',
      'replace',
      'insertKey',
      'duplicate',
      'emptyArray',
      'retype',
    ] as const);
    if (target.path.length === 0) {
      if (op === 'replace') current = pick(rng, JUNK_VALUES);
      continue;
    }
    const parent = parentOf(current, target.path) as Record<string | number, Json> | Json[];
    const key = target.path.at(-1)!;
    if (op === 'delete') {
      if (Array.isArray(parent)) parent.splice(key as number, 1);
      else delete parent[key];
    } else if (op === 'replace') {
      setOwn(parent, key, structuredClone(pick(rng, JUNK_VALUES)));
    } else if (
      op === 'insertKey' &&
      target.value &&
      typeof target.value === 'object' &&
      !Array.isArray(target.value)
    ) {
      setOwn(target.value, pick(rng, JUNK_KEYS), structuredClone(pick(rng, JUNK_VALUES)));
    } else if (op === 'duplicate' && Array.isArray(target.value) && target.value.length > 0) {
      target.value.push(structuredClone(pick(rng, target.value)));
    } else if (op === 'emptyArray' && Array.isArray(target.value)) {
      target.value.length = 0;
    } else if (op === 'retype') {
      const v = target.value;
      setOwn(
        parent,
        key,
        typeof v === 'number'
          ? String(v)
          : typeof v === 'string'
            ? v.length
            : Array.isArray(v)
              ? { ...v }
              : v === null
                ? 0
                : [v],
      );
    }
  }
  return current;
}

function mutateText(text: string, rng: () => number): string {
  const lines = text.split('\n');
  const op = pick(rng, [
    'truncate',
    'deleteLine',
    'dupLine',
    'insert',
    'indent',
    'swap',
    'replaceChar',
  ] as const);
  const i = Math.floor(rng() * lines.length);
  switch (op) {
    case 'truncate':
      return text.slice(0, Math.floor(rng() * text.length));
    case 'deleteLine':
      lines.splice(i, 1);
      return lines.join('\n');
    case 'dupLine':
      lines.splice(i, 0, lines[i] ?? '');
      return lines.join('\n');
    case 'indent':
      lines[i] = (rng() < 0.5 ? ' ' : '') + (lines[i] ?? '').replace(/^ /, rng() < 0.5 ? '' : '   ');
      return lines.join('\n');
    case 'swap': {
      const j = Math.floor(rng() * lines.length);
      [lines[i], lines[j]] = [lines[j]!, lines[i]!];
      return lines.join('\n');
    }
    case 'insert':
    case 'replaceChar': {
      const at = Math.floor(rng() * (text.length + 1));
      return text.slice(0, at) + pick(rng, JUNK_TEXT) + text.slice(op === 'insert' ? at : at + 1);
    }
  }
}

function serialize(doc: Json, rng: () => number): string {
  return rng() < 0.2 ? JSON.stringify(doc) : stringify(doc);
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
