/** Small statistics helpers shared by the benchmarks. */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

export function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

export interface BenchResult {
  name: string;
  /** The headline figure. */
  value: number;
  unit: string;
  /** value / raw cost measured in the same run, when there is one. */
  ratio?: number;
  target: string;
  pass: boolean;
  detail: string;
}

export const fmt = (n: number, digits = 1) => n.toFixed(digits);
