/**
 * A small strict reader of the Prometheus text exposition format (version 0.0.4), for tests:
 * `# HELP` and `# TYPE` lines, samples `name{label="value",...} value [timestamp]`, and the
 * histogram rules (buckets by `le`, monotone, `+Inf` equal to `_count`, `_sum` present). Anything
 * it does not understand is an error, so a malformed scrape fails the test instead of passing.
 */

export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface MetricFamily {
  name: string;
  type: MetricType;
  help: string | undefined;
  samples: Sample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set<MetricType>(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

function parseValue(text: string, line: number): number {
  if (text === '+Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  if (text === 'NaN') return NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text))
    throw new Error(`line ${line}: bad value "${text}"`);
  return Number(text);
}

/** `{a="x",b="y\"z"}` starting at `i`; returns the labels and the index after `}`. */
function parseLabels(s: string, i: number, line: number): [Record<string, string>, number] {
  const labels: Record<string, string> = {};
  i++; // past '{'
  for (;;) {
    if (s[i] === '}') return [labels, i + 1];
    const eq = s.indexOf('=', i);
    if (eq < 0) throw new Error(`line ${line}: label without "="`);
    const name = s.slice(i, eq).trim();
    if (!LABEL_NAME.test(name)) throw new Error(`line ${line}: bad label name "${name}"`);
    if (name in labels) throw new Error(`line ${line}: label "${name}" twice`);
    if (s[eq + 1] !== '"') throw new Error(`line ${line}: label value of "${name}" not quoted`);
    let v = '';
    let j = eq + 2;
    for (; j < s.length && s[j] !== '"'; j++) {
      if (s[j] === '\\') {
        const n = s[++j];
        if (n === 'n') v += '\n';
        else if (n === '\\' || n === '"') v += n;
        else throw new Error(`line ${line}: bad escape "\\${n}" in label "${name}"`);
      } else v += s[j];
    }
    if (j >= s.length) throw new Error(`line ${line}: unterminated label value`);
    labels[name] = v;
    i = j + 1;
    if (s[i] === ',') i++;
    else if (s[i] !== '}') throw new Error(`line ${line}: expected "," or "}" after label "${name}"`);
  }
}

/** The family a sample belongs to: histogram/summary samples carry a suffix. */
function familyOf(name: string, families: Map<string, MetricFamily>): MetricFamily | undefined {
  if (families.has(name)) return families.get(name);
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (!name.endsWith(suffix)) continue;
    const f = families.get(name.slice(0, -suffix.length));
    if (f && (f.type === 'histogram' || f.type === 'summary')) return f;
  }
  return undefined;
}

export function parsePromText(text: string): Map<string, MetricFamily> {
  const families = new Map<string, MetricFamily>();
  const lines = text.split('\n');
  if (lines.at(-1) !== '') throw new Error('the exposition does not end with a newline');
  lines.forEach((raw, idx) => {
    const line = idx + 1;
    if (raw === '') return;
    if (raw.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+)(?: (.*))?$/.exec(raw);
      if (!m) return; // a plain comment
      const [, kind, name, rest] = m;
      if (!NAME.test(name!)) throw new Error(`line ${line}: bad metric name "${name}"`);
      const f = families.get(name!) ?? { name: name!, type: 'untyped', help: undefined, samples: [] };
      if (f.samples.length) throw new Error(`line ${line}: ${kind} for ${name} after its samples`);
      if (kind === 'TYPE') {
        if (!TYPES.has(rest as MetricType)) throw new Error(`line ${line}: unknown type "${rest}"`);
        f.type = rest as MetricType;
      } else f.help = rest ?? '';
      families.set(name!, f);
      return;
    }
    const nameEnd = raw.search(/[{ ]/);
    if (nameEnd <= 0) throw new Error(`line ${line}: no sample name`);
    const name = raw.slice(0, nameEnd);
    if (!NAME.test(name)) throw new Error(`line ${line}: bad metric name "${name}"`);
    let labels: Record<string, string> = {};
    let i = nameEnd;
    if (raw[i] === '{') [labels, i] = parseLabels(raw, i, line);
    const parts = raw.slice(i).trim().split(/ +/);
    if (parts.length < 1 || parts.length > 2 || parts[0] === '') throw new Error(`line ${line}: bad sample`);
    const value = parseValue(parts[0]!, line);
    let f = familyOf(name, families);
    if (!f) {
      f = { name, type: 'untyped', help: undefined, samples: [] };
      families.set(name, f);
    }
    f.samples.push({ name, labels, value });
  });
  for (const f of families.values()) if (f.type === 'histogram') checkHistogram(f);
  return families;
}

/** Series key without `le`: one histogram series per distinct set of the other labels. */
function seriesKey(labels: Record<string, string>): string {
  return JSON.stringify(
    Object.entries(labels)
      .filter(([k]) => k !== 'le')
      .sort(),
  );
}

function checkHistogram(f: MetricFamily): void {
  const series = new Map<string, { buckets: [number, number][]; sum?: number; count?: number }>();
  const get = (labels: Record<string, string>) => {
    const key = seriesKey(labels);
    let s = series.get(key);
    if (!s) series.set(key, (s = { buckets: [] }));
    return s;
  };
  for (const s of f.samples) {
    if (s.name === `${f.name}_bucket`) {
      if (s.labels.le === undefined) throw new Error(`${f.name}: bucket without le`);
      get(s.labels).buckets.push([parseValue(s.labels.le, 0), s.value]);
    } else if (s.name === `${f.name}_sum`) get(s.labels).sum = s.value;
    else if (s.name === `${f.name}_count`) get(s.labels).count = s.value;
    else throw new Error(`${f.name}: unexpected sample ${s.name} in a histogram`);
  }
  for (const [key, s] of series) {
    const where = `${f.name}${key}`;
    if (s.sum === undefined) throw new Error(`${where}: no _sum`);
    if (s.count === undefined) throw new Error(`${where}: no _count`);
    const inf = s.buckets.find(([le]) => le === Infinity);
    if (!inf) throw new Error(`${where}: no +Inf bucket`);
    if (inf[1] !== s.count) throw new Error(`${where}: +Inf bucket ${inf[1]} != _count ${s.count}`);
    for (let i = 1; i < s.buckets.length; i++) {
      const [le0, n0] = s.buckets[i - 1]!;
      const [le1, n1] = s.buckets[i]!;
      if (!(le1 > le0)) throw new Error(`${where}: bucket bounds not increasing (${le0}, ${le1})`);
      if (n1 < n0) throw new Error(`${where}: bucket counts not monotone at le=${le1}`);
    }
  }
}

/** The `_bucket` bounds and the count of each histogram series, for assertions. */
export function histogramSeries(
  f: MetricFamily,
): { labels: Record<string, string>; les: number[]; count: number }[] {
  const out = new Map<string, { labels: Record<string, string>; les: number[]; count: number }>();
  for (const s of f.samples) {
    const key = seriesKey(s.labels);
    const labels = Object.fromEntries(Object.entries(s.labels).filter(([k]) => k !== 'le'));
    const e = out.get(key) ?? { labels, les: [], count: 0 };
    if (s.name.endsWith('_bucket')) e.les.push(parseValue(s.labels.le!, 0));
    if (s.name.endsWith('_count')) e.count = s.value;
    out.set(key, e);
  }
  return [...out.values()];
}
