/**
 * Label rules shared by the config schema and the scaler: canonical form, the reserved
 * `kici:` namespace, platform taints and role normalisation.
 */

/** Labels under this prefix are minted by the orchestrator and agents, never configured. */
export const RESERVED_LABEL_PREFIX = 'kici:';

export const SCALER_OSES = ['linux', 'macos', 'windows'] as const;
export const SCALER_ARCHES = ['x64', 'arm64'] as const;
export const SCALER_ROLES = ['builder', 'init-runner'] as const;

export type ScalerOs = (typeof SCALER_OSES)[number];
export type ScalerArch = (typeof SCALER_ARCHES)[number];
export type ScalerRole = (typeof SCALER_ROLES)[number];
export interface ScalerPlatform {
  os: ScalerOs;
  arch: ScalerArch;
}

/**
 * Words that name a platform. Since 0.16 a label set may not use them as plain labels
 * without a structured `platform`, because the taint they imply used to depend on the
 * host that loaded the file.
 */
export const PLATFORM_LABEL_WORDS: readonly string[] = [
  'windows',
  'win32',
  'macos',
  'darwin',
  'arm64',
  'aarch64',
  'arm',
];

/** Trim + lowercase: the fold applied to every label at every ingress. */
export function foldLabel(label: string): string {
  return label.trim().toLowerCase();
}

/**
 * The canonical form of a label list: each label folded, the declared order and any duplicates
 * kept, so what an operator wrote is what agents (KICI_LABELS), events and status show. Matching
 * never depends on order: it compares sets, or the key of normalizeLabelSet.
 */
export function canonicalizeLabels(labels: readonly string[]): string[] {
  return labels.map(foldLabel);
}

/**
 * A label set's identity (backend lookup, warm-pool keys, overlap check): folded, de-duplicated
 * and sorted (code-unit order), joined by ','; two spellings of the same set get one key.
 */
export function normalizeLabelSet(labels: readonly string[]): string {
  return [...new Set(labels.map(foldLabel))].sort().join(',');
}

export function hasReservedPrefix(label: string): boolean {
  return foldLabel(label).startsWith(RESERVED_LABEL_PREFIX);
}

export function isPlatformLabelWord(label: string): boolean {
  return PLATFORM_LABEL_WORDS.includes(foldLabel(label));
}

/**
 * Taint tokens of a platform: the default linux/x64 carries none, so ordinary jobs keep
 * landing on ordinary pools; anything else must be asked for by name.
 */
export function platformToTaints(platform: ScalerPlatform | undefined): string[] {
  if (!platform) return [];
  const taints: string[] = [];
  if (platform.os === 'macos') taints.push('macos');
  if (platform.os === 'windows') taints.push('windows');
  if (platform.arch === 'arm64') taints.push('arm64');
  return taints;
}

/**
 * `roles` as configured -> as used: absent or containing `all` means every role
 * (undefined); `[]` means execution jobs only; otherwise the listed roles.
 */
export function normalizeRoles(roles: readonly (ScalerRole | 'all')[] | undefined): ScalerRole[] | undefined {
  if (roles === undefined || roles.includes('all')) return undefined;
  return [...new Set(roles.filter((r): r is ScalerRole => r !== 'all'))];
}
