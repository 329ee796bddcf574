/** Mutations for the config fuzz test: object-level and text-level damage to valid configs. */
import { stringify } from 'yaml';

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Path = (string | number)[];

/** Deterministic per-case randomness derived from the fast-check seed. */
export function rngFrom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
export const pick = <T>(rng: () => number, items: readonly T[]): T =>
  items[Math.floor(rng() * items.length)]!;

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

export function mutateObject(doc: Json, rng: () => number): Json {
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

export function mutateText(text: string, rng: () => number): string {
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

export function serialize(doc: Json, rng: () => number): string {
  return rng() < 0.2 ? JSON.stringify(doc) : stringify(doc);
}
