/** The soak benchmark's samples drawn as an SVG: one small panel per figure, jobs along x. */

export interface SoakSample {
  jobs: number;
  /** What the database reports as its size (tables and indexes). */
  dbBytes: number;
  /** The embedded database's files on disk, the write-ahead log included. */
  diskBytes: number;
  rssBytes: number;
  p50Ms: number;
  p99Ms: number;
  cpuMsPerJob: number;
}

const W = 360;
const H = 180;
const PAD = { l: 52, r: 12, t: 26, b: 30 };

interface Series {
  values: number[];
  color: string;
  label: string;
}

function panel(x0: number, y0: number, title: string, xs: number[], series: Series[]): string {
  const all = series.flatMap((s) => s.values).filter(Number.isFinite);
  const yMax = Math.max(1e-9, ...all) * 1.1;
  const xMax = Math.max(1, ...xs);
  const px = (x: number) => x0 + PAD.l + (x / xMax) * (W - PAD.l - PAD.r);
  const py = (y: number) => y0 + H - PAD.b - (y / yMax) * (H - PAD.t - PAD.b);
  const fmt = (v: number) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));
  const out = [
    `<text x="${x0 + PAD.l}" y="${y0 + 16}" font-size="13" font-weight="bold">${title}</text>`,
    `<line x1="${px(0)}" y1="${py(0)}" x2="${px(xMax)}" y2="${py(0)}" stroke="#444"/>`,
    `<line x1="${px(0)}" y1="${py(0)}" x2="${px(0)}" y2="${py(yMax)}" stroke="#444"/>`,
    `<text x="${px(0) - 4}" y="${py(yMax) + 4}" font-size="10" text-anchor="end">${fmt(yMax)}</text>`,
    `<text x="${px(0) - 4}" y="${py(0) + 4}" font-size="10" text-anchor="end">0</text>`,
    `<text x="${px(xMax)}" y="${py(0) + 14}" font-size="10" text-anchor="end">${xMax} jobs</text>`,
  ];
  series.forEach((s, i) => {
    const pts = s.values.map(
      (v, k) => `${px(xs[k]!).toFixed(1)},${py(Number.isFinite(v) ? v : 0).toFixed(1)}`,
    );
    out.push(`<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${pts.join(' ')}"/>`);
    if (series.length > 1)
      out.push(
        `<text x="${x0 + W - PAD.r}" y="${y0 + 16 + i * 12}" font-size="10" fill="${s.color}" text-anchor="end">${s.label}</text>`,
      );
  });
  return out.join('\n');
}

export function soakSvg(samples: readonly SoakSample[]): string {
  const xs = samples.map((s) => s.jobs);
  const mib = (b: number) => b / 2 ** 20;
  const panels = [
    panel(0, 0, 'database size (MiB)', xs, [
      { values: samples.map((s) => mib(s.dbBytes)), color: '#1f77b4', label: 'database' },
      { values: samples.map((s) => mib(s.diskBytes)), color: '#17becf', label: 'files with log' },
    ]),
    panel(W, 0, 'server RSS (MiB)', xs, [
      { values: samples.map((s) => mib(s.rssBytes)), color: '#2ca02c', label: 'rss' },
    ]),
    panel(0, H, 'dispatch latency (ms)', xs, [
      { values: samples.map((s) => s.p50Ms), color: '#ff7f0e', label: 'p50' },
      { values: samples.map((s) => s.p99Ms), color: '#d62728', label: 'p99' },
    ]),
    panel(W, H, 'server CPU per job (ms)', xs, [
      { values: samples.map((s) => s.cpuMsPerJob), color: '#9467bd', label: 'cpu' },
    ]),
  ];
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${2 * W}" height="${2 * H}" viewBox="0 0 ${2 * W} ${2 * H}" font-family="sans-serif">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    ...panels,
    '</svg>',
    '',
  ].join('\n');
}
