import type { SimReport } from './report.js';

/**
 * Queue wait (mean per bucket) and live agents over time as a small self-contained SVG: two
 * panels, one line per config. Plain text, no scripts, so it is safe to embed anywhere.
 */
export function renderChart(proposed: SimReport, current?: SimReport): string {
  const W = 900;
  const H = 200;
  const PAD = 50;
  const series = [
    ...(current ? [{ name: 'current', r: current, color: '#888' }] : []),
    { name: 'proposed', r: proposed, color: '#1f6feb' },
  ];
  const panel = (title: string, y0: number, pick: (r: SimReport) => number[], unit: string) => {
    const max = Math.max(1, ...series.flatMap((s) => pick(s.r)));
    const lines = series.map((s) => {
      const v = pick(s.r);
      const pts = v
        .map(
          (y, i) =>
            `${(PAD + (i / Math.max(1, v.length - 1)) * (W - 2 * PAD)).toFixed(1)},${(y0 + H - (y / max) * H).toFixed(1)}`,
        )
        .join(' ');
      return `<polyline fill="none" stroke="${s.color}" stroke-width="1.5" points="${pts}"/>`;
    });
    return [
      `<text x="${PAD}" y="${y0 - 8}" font-size="13">${title}</text>`,
      `<line x1="${PAD}" y1="${y0 + H}" x2="${W - PAD}" y2="${y0 + H}" stroke="#ccc"/>`,
      `<text x="4" y="${y0 + 10}" font-size="10">${Math.round(max)}${unit}</text>`,
      `<text x="4" y="${y0 + H}" font-size="10">0</text>`,
      ...lines,
    ].join('\n');
  };
  const legend = series
    .map(
      (s, i) =>
        `<text x="${W - PAD - 160 + i * 80}" y="16" font-size="12" fill="${s.color}">${s.name}</text>`,
    )
    .join('\n');
  const hours = (proposed.timeline.bucketMs * proposed.timeline.agents.length) / 3_600_000;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${2 * H + 120}" viewBox="0 0 ${W} ${2 * H + 120}" font-family="sans-serif">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    legend,
    panel('Queue wait (mean per interval)', 40, (r) => r.timeline.waitMeanMs, ' ms'),
    panel('Live agents (peak per interval)', H + 90, (r) => r.timeline.agents, ''),
    `<text x="${PAD}" y="${2 * H + 110}" font-size="10">time → (${hours < 2 ? `${Math.round(hours * 60)} min` : `${Math.round(hours)} h`} in ${proposed.timeline.agents.length} intervals)</text>`,
    '</svg>',
    '',
  ].join('\n');
}
