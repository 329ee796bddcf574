/**
 * Request generators for the HTTP fuzz test: valid run specs and token bodies mutated node by
 * node, raw junk bodies, junk path segments and query strings, and random methods.
 */

/** mulberry32: small, seedable, good enough to pick mutations. */
export function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
  return { next, int, pick, chance: (p: number) => next() < p };
}
type Rng = ReturnType<typeof rng>;

const NASTY_STRINGS = [
  '',
  ' ',
  'a\u0000b',
  '\u0000',
  'x\ud800',
  '\udc00y',
  '\ud83d\ude00',
  'a,b',
  '../../etc/passwd',
  '%00',
  '${HOME}',
  '$(reboot)',
  'kici:reserved',
  'scaler-x',
  '\n\r\t',
  'Ω≈ç√',
  'x'.repeat(300),
];
const NASTY_NUMBERS = [0, -1, 1.5, 1e15, 1e308, -1e308, 2 ** 31, 2 ** 53, 2 ** 53 + 2, 2_592_001, 5e-324];

function nastyValue(r: Rng, depth = 0): unknown {
  switch (r.int(10)) {
    case 0:
      return r.pick(NASTY_STRINGS);
    case 1:
      return r.pick(NASTY_NUMBERS);
    case 2:
      return r.pick([true, false, null]);
    case 3:
      return depth < 3 ? [nastyValue(r, depth + 1), nastyValue(r, depth + 1)] : [];
    case 4:
      return depth < 3 ? { [r.pick(NASTY_STRINGS)]: nastyValue(r, depth + 1) } : {};
    case 5: {
      // Deep nesting, past the API's depth limit.
      let v: unknown = 'deep';
      for (let i = 0, n = 20 + r.int(60); i < n; i++) v = r.chance(0.5) ? [v] : { a: v };
      return v;
    }
    case 6:
      return 'y'.repeat(r.pick([1000, 70_000, 1_000_000]));
    case 7:
      return String.fromCharCode(...Array.from({ length: 1 + r.int(20) }, () => r.int(0x10000)));
    default:
      return r.pick(NASTY_STRINGS) + r.int(1000);
  }
}

function validRun(r: Rng): Record<string, unknown> {
  // Nobody serves these labels: a body that stays valid queues jobs that end `no-backend`.
  return {
    name: `fuzz-${r.int(1000)}`,
    jobs: {
      build: {
        runsOn: ['fuzz-none', `f${r.int(10)}`],
        env: { FOO: 'bar' },
        timeoutSeconds: 60,
        resources: { requests: { cpus: 1, memory: '512m' } },
        steps: [{ name: 'compile', run: 'echo hi', timeoutSeconds: 30, env: { A: 'b' } }],
      },
      test: { runsOn: 'fuzz-none', steps: [{ run: 'true' }], role: 'build', excludeLabels: ['x'] },
    },
  };
}

function validToken(r: Rng): Record<string, unknown> {
  return { labels: ['fuzz-token', `t${r.int(10)}`], agentId: `fuzz-agent-${r.int(1000)}`, ttlSeconds: 60 };
}

/** Replace, delete or add one node somewhere in a JSON tree (in place). */
function mutate(r: Rng, root: unknown, rounds: number): unknown {
  let tree = root;
  for (let k = 0; k < rounds; k++) {
    const nodes: { parent: Record<string, unknown> | unknown[]; key: string | number }[] = [];
    const walk = (v: unknown) => {
      if (Array.isArray(v)) v.forEach((x, i) => (nodes.push({ parent: v, key: i }), walk(x)));
      else if (v && typeof v === 'object')
        for (const [key, x] of Object.entries(v)) {
          nodes.push({ parent: v as Record<string, unknown>, key });
          walk(x);
        }
    };
    walk(tree);
    if (!nodes.length || r.chance(0.05)) {
      tree = nastyValue(r);
      continue;
    }
    const { parent, key } = r.pick(nodes);
    const op = r.int(4);
    if (op === 0 && !Array.isArray(parent)) delete parent[key as string];
    else if (op === 1 && !Array.isArray(parent)) parent[r.pick(NASTY_STRINGS) || 'k'] = nastyValue(r);
    else (parent as Record<string | number, unknown>)[key] = nastyValue(r);
  }
  return tree;
}

const RAW_BODIES = [
  '',
  '{',
  '[]',
  'null',
  '"str"',
  '1e999',
  '{"jobs": 1e999}',
  '{"a":1,"a":2}',
  '\u0000',
  '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[',
  '['.repeat(100_000) + ']'.repeat(100_000),
  '{"jobs":{"x":{"runsOn":"fuzz-none","steps":[{"run":"\\ud800"}]}}}',
  '{"jobs":{"x":{"runsOn":"fuzz-none","steps":[{"run":"a\\u0000"}]}}}',
];

/** Percent-encode every UTF-8 byte (encodeURIComponent throws on a lone surrogate). */
function pct(s: string): string {
  return [...Buffer.from(s, 'utf8')].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');
}

function junkSegment(r: Rng): string {
  return r.pick([
    '%00',
    '%',
    '%zz',
    '%E0%A4%A',
    '%ff%fe',
    '%2F..%2F',
    '..',
    '.',
    'j-000000000000',
    'r-000000000000',
    pct(r.pick(NASTY_STRINGS)),
    'x'.repeat(r.pick([1, 127, 128, 129, 5000])),
    String(r.int(1e9)),
    '%F0%9F%98%80',
    '%ED%A0%80',
  ]);
}

function junkQuery(r: Rng): string {
  const keys = ['state', 'limit', 'runId', 'after', 'x', '', '%00'];
  const vals = [
    'queued',
    'running',
    '0',
    '-1',
    '10001',
    '1.5',
    '99999999999999999999999999',
    '9007199254740991',
    '%00',
    '%zz',
    '',
    'NaN',
    'Infinity',
    '1e3',
  ];
  const n = r.int(4);
  if (!n) return '';
  return `?${Array.from({ length: n }, () => `${r.pick(keys)}=${r.pick(vals)}`).join(r.pick(['&', '&&', ';']))}`;
}

export interface Case {
  method: string;
  path: string;
  body?: string;
  contentType?: string;
  auth: 'admin' | 'none' | 'wrong';
}

export function makeCase(r: Rng, jobId: string): Case {
  const auth = r.chance(0.9) ? 'admin' : r.pick(['none', 'wrong'] as const);
  const kind = r.int(10);
  if (kind < 4) {
    const body = r.chance(0.15) ? validRun(r) : mutate(r, validRun(r), 1 + r.int(4));
    return { method: 'POST', path: '/api/v1/runs', body: JSON.stringify(body), auth };
  }
  if (kind < 6) {
    const body = r.chance(0.15) ? validToken(r) : mutate(r, validToken(r), 1 + r.int(3));
    return { method: 'POST', path: '/api/v1/agents/tokens', body: JSON.stringify(body), auth };
  }
  if (kind < 7)
    return {
      method: 'POST',
      path: r.pick(['/api/v1/runs', '/api/v1/agents/tokens']),
      body: r.pick(RAW_BODIES),
      contentType: r.pick(['application/json', 'text/plain', '']),
      auth,
    };
  const id = r.chance(0.3) ? jobId : junkSegment(r);
  const templates = [
    `/api/v1/jobs/${id}`,
    `/api/v1/jobs/${id}/logs`,
    `/api/v1/jobs/${id}/cancel`,
    `/api/v1/runs/${id}`,
    `/api/v1/scaler/explain/${id}`,
    '/api/v1/jobs',
    '/api/v1/agents',
    '/api/v1/scaler/status',
    `/api/v1/${junkSegment(r)}`,
    `/${junkSegment(r)}`,
    '/healthz',
    '/readyz',
    '/metrics',
  ];
  const method = r.pick(['GET', 'GET', 'GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS']);
  const body =
    method !== 'GET' && method !== 'HEAD' && r.chance(0.5) ? JSON.stringify(nastyValue(r)) : undefined;
  return { method, path: r.pick(templates) + junkQuery(r), ...(body !== undefined ? { body } : {}), auth };
}
