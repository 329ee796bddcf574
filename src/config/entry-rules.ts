/**
 * Cross-field rules of one scaler entry (what one field allows depends on another). They run on the
 * partly parsed entry even when some fields already failed, so an operator sees every problem at
 * once; hence the defensive reads of `unknown` values.
 */
import { isExtraHostEntry } from './addresses.js';
import { foldLabel, isPlatformLabelWord, platformToTaints, type ScalerPlatform } from './labels.js';

export interface RuleIssue {
  path: (string | number)[];
  message: string;
}

/**
 * Characters cmd.exe treats as syntax even inside a quoted batch-file path (`%`, `!`
 * expand; `"` ends the quoting) or as command separators/redirection when quoting is
 * lost. The agent launcher refuses such a path, so the config does too.
 */
const CMD_METACHARACTERS = /[&|<>^%!()",;\r\n]/;

/** A `.cmd`/`.bat` binaryPath that cmd.exe would partly interpret as syntax. */
export function isUnsafeBatchPath(binaryPath: string): boolean {
  return /\.(cmd|bat)$/i.test(binaryPath.trim()) && CMD_METACHARACTERS.test(binaryPath);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function strings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}

function platformOf(value: unknown): ScalerPlatform | undefined {
  if (!isRecord(value)) return undefined;
  const { os, arch } = value;
  const oses = ['linux', 'macos', 'windows'];
  const arches = ['x64', 'arm64'];
  return oses.includes(os as string) && arches.includes(arch as string)
    ? ({ os, arch } as ScalerPlatform)
    : undefined;
}

const FIRECRACKER_REQUIRED: [string, string][] = [
  ['firecrackerPath', 'the firecracker binary'],
  ['jailerPath', 'the jailer binary'],
  ['kernelPath', 'the guest kernel'],
  ['uid', 'the uid the jailer drops to'],
  ['gid', 'the gid the jailer drops to'],
];

/** Check one entry; `hostPlatform` is where the config is loaded (only the Windows rule uses it). */
export function checkScalerEntryRules(
  entry: Record<string, unknown>,
  hostPlatform: NodeJS.Platform,
): RuleIssue[] {
  const issues: RuleIssue[] = [];
  const type = entry.type;
  const labelSets = Array.isArray(entry.labelSets) ? entry.labelSets : [];
  const platform = platformOf(entry.platform);
  const taints = platformToTaints(platform);
  const gate = [...new Set([...strings(entry.mandatoryLabels).map(foldLabel), ...taints])];

  const targets = entry.provisioningTargets;
  if (type === 'event' && (targets === undefined || (Array.isArray(targets) && targets.length === 0))) {
    issues.push({
      path: ['provisioningTargets'],
      message: 'event scalers need at least one provisioning target (job:<file> or webhook:<url>)',
    });
  }
  if (type === 'firecracker') {
    // With the qemu VMM there is no firecracker binary, jailer or jailer identity to name.
    const required =
      entry.vmm === 'qemu' ? FIRECRACKER_REQUIRED.filter(([f]) => f === 'kernelPath') : FIRECRACKER_REQUIRED;
    for (const [field, what] of required) {
      if (entry[field] === undefined) {
        issues.push({ path: [field], message: `firecracker scalers need ${field} (${what}) (required)` });
      }
    }
    if (Array.isArray(entry.extraHosts)) {
      entry.extraHosts.forEach((h, j) => {
        if (typeof h === 'string' && !isExtraHostEntry(h)) {
          issues.push({
            path: ['extraHosts', j],
            message: `"${h}" is not host:address (address: an IP or host-gateway)`,
          });
        }
      });
    }
  }

  labelSets.forEach((set, i) => {
    if (!isRecord(set)) return;
    const at = (field: string): (string | number)[] => ['labelSets', i, field];
    if (type === 'container' && set.image === undefined) {
      issues.push({ path: at('image'), message: 'container scalers need an agent image (required)' });
    }
    if (type === 'bare-metal') {
      if (set.binaryPath === undefined && set.image === undefined) {
        issues.push({
          path: at('binaryPath'),
          message:
            'bare-metal scalers need binaryPath (the agent executable) or image (job-image mode) (required)',
        });
      }
      if (
        hostPlatform === 'win32' &&
        typeof set.binaryPath === 'string' &&
        isUnsafeBatchPath(set.binaryPath)
      ) {
        issues.push({
          path: at('binaryPath'),
          message: `batch-file path "${set.binaryPath}" contains characters cmd.exe would run as syntax (& | < > ^ % ! ( ) " , ;); rename or move it`,
        });
      }
    }
    if (type === 'firecracker' && set.rootfsPath === undefined) {
      issues.push({
        path: at('rootfsPath'),
        message: 'firecracker scalers need a rootfsPath in every label set (required)',
      });
    }

    const labels = strings(set.labels).map(foldLabel);
    if (!platform && entry.platform === undefined) {
      for (const word of new Set(labels.filter(isPlatformLabelWord))) {
        issues.push({
          path: at('labels'),
          message: `label "${word}" names a platform; declare platform: { os, arch } instead`,
        });
      }
    }
    const reachable = new Set([...labels, ...taints]);
    for (const label of gate) {
      if (!reachable.has(label)) {
        issues.push({
          path: at('labels'),
          message: `mandatory label "${label}" is missing from this label set, so no job could ever reach it; add it to labels or drop it from mandatoryLabels`,
        });
      }
    }
  });
  return issues;
}
