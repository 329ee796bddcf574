import { arch as hostArch, platform as hostPlatform } from 'node:os';
import {
  canonicalizeLabels,
  normalizeLabelSet,
  platformToTaints,
  type ScalerConfig,
  type ScalerEntry,
  type ScalerPlatform,
  type ScalerType,
} from '../../config/index.js';

/**
 * Pure routing: which label set of which scaler serves a job. Built once per config (and reload),
 * then every decision is a scan over plain arrays and sets with no I/O.
 */
export interface RoutableLabelSet {
  scalerName: string;
  type: ScalerType;
  index: number;
  /** Declared labels, canonical. */
  declared: string[];
  key: string;
  /** Declared labels ∪ auto labels (kici:agent, kici:scaler, roles, os/arch, platform taints). */
  labels: ReadonlySet<string>;
  /** Labels a job must carry to land here (mandatoryLabels ∪ platform taints). */
  gate: string[];
  /** Taint tokens the agent gets as labels. */
  taints: string[];
  roleLabels: string[];
  /** Bare-metal process mode (binaryPath): steps run on the host, so a job's `container:` image cannot be honoured. */
  hostProcess?: boolean;
}

export type JobRole = 'execution' | 'build' | 'init';

export interface HostFacts {
  os: NodeJS.Platform;
  arch: string;
}

export const currentHost = (): HostFacts => ({ os: hostPlatform(), arch: hostArch() });

export function roleLabelsFor(roles: ScalerEntry['roles']): string[] {
  // An explicit empty list means the agents take no role: no role label at all.
  if (roles !== undefined && roles.length === 0) return [];
  const list = roles === undefined ? ['builder', 'init-runner'] : roles;
  return ['kici:role:execution', ...list.map((r) => `kici:role:${r}`)];
}

/** The label a job's role requires on the agent, if any. */
export function roleRequirement(role: JobRole | undefined): string | undefined {
  if (role === 'build') return 'kici:role:builder';
  if (role === 'init') return 'kici:role:init-runner';
  return undefined;
}

function osArchLabels(entry: ScalerEntry, host: HostFacts): string[] {
  const p: ScalerPlatform | undefined = entry.platform;
  const os = p?.os ?? (entry.type === 'bare-metal' ? mapOs(host.os) : 'linux');
  const arch = p?.arch ?? mapArch(host.arch);
  const out = [`kici:os:${os}`, `kici:arch:${arch}`];
  if (os === 'macos') out.push('kici:os:darwin');
  if (os === 'windows') out.push('kici:os:win32');
  if (arch === 'x64') out.push('kici:arch:amd64');
  return out;
}

function mapOs(os: NodeJS.Platform): string {
  if (os === 'darwin') return 'macos';
  if (os === 'win32') return 'windows';
  return os;
}
function mapArch(a: string): string {
  return a === 'arm64' ? 'arm64' : a;
}

/** The labels an agent of this scaler carries (and its token is bound to). */
export function agentLabelsFor(entry: ScalerEntry, declared: string[]): string[] {
  const taints = platformToTaints(entry.platform);
  // Declared labels first, in their order (duplicates too), then what the scaler adds.
  return canonicalizeLabels([
    ...declared,
    `kici:agent:${entry.type}`,
    `kici:scaler:${entry.name}`,
    ...roleLabelsFor(entry.roles),
    ...taints,
  ]);
}

export function buildRoutingTable(
  config: Pick<ScalerConfig, 'scalers'>,
  opts: { host?: HostFacts; exclude?: ReadonlySet<string> } = {},
): RoutableLabelSet[] {
  const host = opts.host ?? currentHost();
  const table: RoutableLabelSet[] = [];
  for (const entry of config.scalers) {
    if (opts.exclude?.has(entry.name)) continue;
    const taints = platformToTaints(entry.platform);
    // Declared order, each label once: a job must name every one of them.
    const gate = [...new Set(canonicalizeLabels([...entry.mandatoryLabels, ...taints]))];
    const auto = [
      `kici:agent:${entry.type}`,
      `kici:scaler:${entry.name}`,
      ...roleLabelsFor(entry.roles),
      ...osArchLabels(entry, host),
      ...taints,
    ];
    entry.labelSets.forEach((ls, index) => {
      const declared = canonicalizeLabels(ls.labels);
      table.push({
        scalerName: entry.name,
        type: entry.type,
        index,
        declared,
        key: normalizeLabelSet(declared),
        labels: new Set(canonicalizeLabels([...declared, ...auto])),
        gate,
        taints,
        roleLabels: roleLabelsFor(entry.roles),
        hostProcess: entry.type === 'bare-metal' && ls.binaryPath !== undefined,
      });
    });
  }
  return table;
}

export interface RouteQuery {
  /** The job's runsOn, canonical. */
  labels: string[];
  role?: JobRole | undefined;
  exclude?: readonly string[];
  /** The job's `container:` image, if it asks for one: only sets that can run job images qualify. */
  image?: string | undefined;
}

/** Per table: label → positions of the sets carrying it, so a lookup scans only candidates. */
const indexes = new WeakMap<readonly RoutableLabelSet[], Map<string, number[]>>();

function indexOf(table: readonly RoutableLabelSet[]): Map<string, number[]> {
  let idx = indexes.get(table);
  if (!idx) {
    idx = new Map();
    table.forEach((ls, pos) => {
      for (const l of ls.labels) {
        const list = idx!.get(l);
        if (list) list.push(pos);
        else idx!.set(l, [pos]);
      }
    });
    indexes.set(table, idx);
  }
  return idx;
}

function matches(
  ls: RoutableLabelSet,
  wanted: readonly string[],
  jobSet: ReadonlySet<string>,
  q: RouteQuery,
  roleLabel?: string,
) {
  for (const g of ls.gate) if (!jobSet.has(g)) return false;
  for (const l of wanted) if (!ls.labels.has(l)) return false;
  if (roleLabel && !ls.labels.has(roleLabel)) return false;
  if (q.exclude) for (const x of q.exclude) if (ls.labels.has(x)) return false;
  if (q.image && ls.hostProcess) return false;
  return true;
}

/**
 * The most specific label set that can serve the job: every job label is in the set, every gate
 * label is in the job, no excluded label is in the set. Smallest declared set wins; first on a tie.
 * Tables are treated as immutable (a reload builds a new one), which lets the label index be cached.
 */
export function findLabelSet(
  query: RouteQuery,
  table: readonly RoutableLabelSet[],
): RoutableLabelSet | undefined {
  const wanted = query.labels;
  const roleLabel = roleRequirement(query.role);
  if (wanted.length === 0) {
    return table.find((ls) => ls.gate.length === 0 && matches(ls, wanted, new Set(), query, roleLabel));
  }
  const idx = indexOf(table);
  let candidates: number[] | undefined;
  for (const l of wanted) {
    const list = idx.get(l);
    if (!list) return undefined;
    if (!candidates || list.length < candidates.length) candidates = list;
  }
  const jobSet = new Set(wanted);
  let best: RoutableLabelSet | undefined;
  for (const pos of candidates!) {
    const ls = table[pos]!;
    if (best && ls.declared.length >= best.declared.length) continue;
    if (matches(ls, wanted, jobSet, query, roleLabel)) best = ls;
  }
  return best;
}

/** Human summary of what could have matched, for a no-backend reason. */
export function describeTable(table: readonly RoutableLabelSet[], limit = 8): string {
  if (table.length === 0) return 'no scaler is configured';
  const shown = table.slice(0, limit).map((t) => `${t.scalerName}[${t.key}]`);
  return `available label sets: ${shown.join(', ')}${table.length > limit ? `, … (${table.length} in all)` : ''}`;
}

/**
 * Why no label set serves the job, naming what is missing. When the labels alone would match but
 * every such set runs host processes, say so: that job needs a set with a container runtime.
 */
export function noMatchReason(query: RouteQuery, table: readonly RoutableLabelSet[]): string {
  if (query.image) {
    const ignoringImage = findLabelSet({ ...query, image: undefined }, table);
    if (ignoringImage?.hostProcess) {
      return (
        `job asks for container image "${query.image}"; label set [${ignoringImage.key}] of scaler ` +
        `"${ignoringImage.scalerName}" runs agents as host processes (binaryPath) and cannot run job ` +
        `images; add a label set with a container runtime`
      );
    }
  }
  return `no scaler label set matches [${query.labels.join(',')}]`;
}
