/** What a valid config amounts to, for `kici-admin scaler validate`. */
import { formatBytes } from './memory.js';
import { normalizeLabelSet, platformToTaints } from './labels.js';
import type { ResourceCap } from './resources.js';
import type { ScalerConfig, ScalerType } from './schema.js';

export interface ScalerSummary {
  name: string;
  type: ScalerType;
  maxAgents: number;
  maxConcurrentSpawns: number;
  /** Normalised label sets, in declaration order. */
  labelSets: string[];
  mandatoryLabels: string[];
  platformTaints: string[];
  resourceCap?: ResourceCap;
  machinePool?: string;
  warmPool?: { size: number; idleTimeoutSeconds: number };
}

export interface ConfigSummary {
  version: 1;
  globalMaxAgents: number;
  globalResourceCap?: ResourceCap;
  machinePools: { name: string; cap: ResourceCap }[];
  totals: {
    scalers: number;
    labelSets: number;
    maxAgents: number;
    byType: Partial<Record<ScalerType, number>>;
  };
  scalers: ScalerSummary[];
}

export function summarizeConfig(config: ScalerConfig): ConfigSummary {
  const byType: Partial<Record<ScalerType, number>> = {};
  const scalers = config.scalers.map((entry): ScalerSummary => {
    byType[entry.type] = (byType[entry.type] ?? 0) + 1;
    const summary: ScalerSummary = {
      name: entry.name,
      type: entry.type,
      maxAgents: entry.maxAgents,
      maxConcurrentSpawns: entry.maxConcurrentSpawns,
      labelSets: entry.labelSets.map((set) => normalizeLabelSet(set.labels)),
      mandatoryLabels: entry.mandatoryLabels,
      platformTaints: platformToTaints(entry.platform),
    };
    if (entry.resourceCap) summary.resourceCap = entry.resourceCap;
    if (entry.machinePool) summary.machinePool = entry.machinePool;
    if (entry.warmPool?.enabled) {
      summary.warmPool = { size: entry.warmPool.size, idleTimeoutSeconds: entry.warmPool.idleTimeoutSeconds };
    }
    return summary;
  });
  const summary: ConfigSummary = {
    version: config.version,
    globalMaxAgents: config.globalMaxAgents,
    machinePools: (config.machinePools ?? []).map((p) => ({ name: p.name, cap: p.cap })),
    totals: {
      scalers: scalers.length,
      labelSets: scalers.reduce((n, s) => n + s.labelSets.length, 0),
      maxAgents: scalers.reduce((n, s) => n + s.maxAgents, 0),
      byType,
    },
    scalers,
  };
  if (config.globalResourceCap) summary.globalResourceCap = config.globalResourceCap;
  return summary;
}

export function formatCap(cap: ResourceCap | undefined): string {
  if (!cap || (cap.maxCpu === undefined && cap.maxMemoryBytes === undefined)) return '-';
  const parts: string[] = [];
  if (cap.maxCpu !== undefined) parts.push(`${cap.maxCpu} cpu`);
  if (cap.maxMemoryBytes !== undefined) parts.push(formatBytes(cap.maxMemoryBytes));
  return parts.join(', ');
}

function table(rows: string[][]): string[] {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  return rows.map((r) =>
    r.map((cell, c) => (c === r.length - 1 ? cell : cell.padEnd(widths[c]!))).join('  '),
  );
}

/** The summary as the human-readable lines the validate command prints. */
export function formatSummary(summary: ConfigSummary): string[] {
  const t = summary.totals;
  const types = Object.entries(t.byType)
    .map(([type, n]) => `${n} ${type}`)
    .join(', ');
  const lines = [
    `${t.scalers} scaler(s)${types ? ` (${types})` : ''}, ${t.labelSets} label set(s)`,
    `globalMaxAgents: ${summary.globalMaxAgents} (sum of scaler maxAgents: ${t.maxAgents})`,
    `globalResourceCap: ${formatCap(summary.globalResourceCap)}`,
  ];
  for (const pool of summary.machinePools) lines.push(`machine pool ${pool.name}: ${formatCap(pool.cap)}`);
  if (summary.scalers.length === 0) return lines;
  const rows = [['SCALER', 'TYPE', 'MAX', 'CAP', 'POOL', 'WARM', 'GATE', 'LABEL SETS']];
  for (const s of summary.scalers) {
    const gate = [...new Set([...s.mandatoryLabels, ...s.platformTaints])].join(',');
    rows.push([
      s.name,
      s.type,
      String(s.maxAgents),
      formatCap(s.resourceCap),
      s.machinePool ?? '-',
      s.warmPool ? String(s.warmPool.size) : '-',
      gate || '-',
      s.labelSets.map((l) => `[${l}]`).join(' '),
    ]);
  }
  return [...lines, '', ...table(rows)];
}
