import { access, constants } from 'node:fs/promises';
import type { LabelSetConfig, ScalerEntry } from '../../../config/index.js';
import { checkLabelSets } from '../../core/label-set-check.js';
import type { ValidationResult } from '../../types.js';
import type { RequiredTool } from '../../types.js';

/**
 * What a VM scaler needs on the host: the VMM and the plumbing tools. Guest files (kernel, initrd,
 * rootfs) are data, not executables, so they are checked at each spawn by guestFileProblem.
 */
export function vmTools(entry: ScalerEntry, resolvePath: (p: string) => string): RequiredTool[] {
  const tools: RequiredTool[] = [
    {
      name: 'ip',
      find: { kind: 'command', command: 'ip' },
      fix: 'apt-get install iproute2',
      severity: 'fatal',
    },
    {
      name: 'mkfs.ext4',
      find: { kind: 'command', command: 'mkfs.ext4' },
      fix: 'apt-get install e2fsprogs',
      severity: 'fatal',
    },
  ];
  if (entry.vmm === 'qemu') {
    const qemu = entry.qemuPath ? resolvePath(entry.qemuPath) : undefined;
    tools.push({
      name: 'qemu-system-x86_64',
      find: qemu ? { kind: 'path', path: qemu } : { kind: 'command', command: 'qemu-system-x86_64' },
      fix: 'apt-get install --no-install-recommends qemu-system-x86, or set qemuPath',
      severity: 'fatal',
      ...(qemu ? { field: 'qemuPath' } : {}),
    });
  } else {
    for (const [field, what] of [
      ['firecrackerPath', 'the firecracker binary'],
      ['jailerPath', 'the jailer binary'],
    ] as const) {
      const p = entry[field];
      if (p)
        tools.push({
          name: what,
          find: { kind: 'path', path: resolvePath(p) },
          fix: `install ${what} at ${p}, or fix ${field}`,
          severity: 'fatal',
          field,
        });
    }
  }
  return tools;
}

/** Why a guest file cannot be used, naming the config field and the fix; undefined when readable. */
export async function guestFileProblem(field: string, path: string): Promise<string | undefined> {
  try {
    await access(path, constants.R_OK);
    return undefined;
  } catch {
    return `${field} ${path} is missing or unreadable; build the guest with scripts/build-vm-guest.sh <dir> and point ${field} at its output`;
  }
}

/** The first unusable guest file of a spawn (kernel, initrd, rootfs), or undefined. */
export async function guestFilesProblem(
  ls: LabelSetConfig,
  entry: ScalerEntry,
  resolvePath: (p: string) => string,
): Promise<string | undefined> {
  const files: [string, string | undefined][] = [
    [ls.kernelPath ? 'labelSets[].kernelPath' : 'kernelPath', ls.kernelPath ?? entry.kernelPath],
    ['initrdPath', entry.initrdPath],
    ['labelSets[].rootfsPath', ls.rootfsPath],
  ];
  for (const [field, p] of files) {
    const problem = p ? await guestFileProblem(field, resolvePath(p)) : undefined;
    if (problem) return problem;
  }
  return undefined;
}

/** Would a VM scaler on `current` accept `next`? The VMM itself cannot change without a restart. */
export function checkVmReload(current: ScalerEntry, next: ScalerEntry): ValidationResult {
  const errors = [
    ...checkLabelSets(next.labelSets),
    ...next.labelSets.flatMap((ls, i) =>
      ls.rootfsPath ? [] : [`labelSets[${i}]: VM label sets need rootfsPath`],
    ),
  ];
  if (next.type !== 'firecracker')
    errors.push(`type: a firecracker backend cannot take a ${next.type} entry`);
  if (next.vmm !== current.vmm)
    errors.push(`vmm: changing the VMM (${current.vmm} → ${next.vmm}) needs a restart`);
  return errors.length ? { valid: false, errors } : { valid: true };
}
