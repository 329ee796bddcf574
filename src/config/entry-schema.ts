/** One item of `scalers[]` (strict: unknown keys rejected), for all four backend types. */
import { z } from 'zod';
import {
  DEFAULT_AGENT_TOKEN_TTL_SECONDS,
  DEFAULT_CLAIM_TTL_SECONDS,
  DEFAULT_FIRECRACKER_MEM_SIZE_MIB,
  DEFAULT_FIRECRACKER_VCPU_COUNT,
  DEFAULT_JAILER_CHROOT_BASE_DIR,
  DEFAULT_MAX_CONCURRENT_SPAWNS,
  DEFAULT_WARM_POOL_IDLE_TIMEOUT_SECONDS,
} from './defaults.js';
import { checkScalerEntryRules } from './entry-rules.js';
import { labelSchema, labelSetConfigSchema, nonEmptyString, positiveInt } from './label-set-schema.js';
import { foldLabel, normalizeRoles, SCALER_ARCHES, SCALER_OSES } from './labels.js';
import { resourceCapSchema } from './resources.js';
import { cronProblem, timezoneProblem } from './warm-schedule.js';

export const SCALER_TYPES = ['container', 'bare-metal', 'firecracker', 'event'] as const;
export type ScalerType = (typeof SCALER_TYPES)[number];

/** Scaler names end up in labels, container labels and metric labels: keep them plain. */
export const SCALER_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

function isUrlWithProtocol(value: string, protocols: string[]): boolean {
  try {
    return protocols.includes(new URL(value).protocol);
  } catch {
    return false;
  }
}

/**
 * Whether a `job:<file>` names a path that stays inside the config directory as written: relative,
 * without a `..` segment. Symbolic links are checked when the file is read.
 */
export function isConfinedJobPath(file: string): boolean {
  if (file.startsWith('/') || file.startsWith('\\') || /^[A-Za-z]:/.test(file)) return false;
  return !file.split(/[\\/]+/).includes('..');
}

/** Product decision: a target is a job template (`job:<file>`) or a webhook (`webhook:<url>`). */
export function isProvisioningTarget(value: string): boolean {
  if (value.startsWith('job:')) return value.slice(4).trim() !== '' && isConfinedJobPath(value.slice(4));
  if (value.startsWith('webhook:')) return isUrlWithProtocol(value.slice(8), ['http:', 'https:']);
  return false;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const warmScheduleEntrySchema = z
  .strictObject({
    cron: z.string().meta({ description: 'Five-field cron expression: when this size takes effect.' }),
    size: z.number().int().nonnegative(),
    timezone: z.string().default('UTC'),
  })
  .superRefine((e, ctx) => {
    const cron = cronProblem(e.cron);
    if (cron) ctx.addIssue({ code: 'custom', path: ['cron'], message: cron });
    const tz = timezoneProblem(e.timezone);
    if (tz) ctx.addIssue({ code: 'custom', path: ['timezone'], message: tz });
  });

export const warmPoolSchema = z.strictObject({
  enabled: z.boolean().default(false),
  size: z
    .number()
    .int()
    .nonnegative()
    .default(0)
    .meta({ description: 'Idle agents kept ready per label set.' }),
  idleTimeoutSeconds: z.number().positive().default(DEFAULT_WARM_POOL_IDLE_TIMEOUT_SECONDS),
  schedule: z
    .array(warmScheduleEntrySchema)
    .max(100)
    .optional()
    .meta({ description: 'Pool sizes by time: each entry sets the size from its cron moment on.' }),
});

export const platformSchema = z.strictObject({ os: z.enum(SCALER_OSES), arch: z.enum(SCALER_ARCHES) });

const typeSchema = z.enum(SCALER_TYPES, {
  // Other inputs fall through to the shared message ("expected one of ...").
  error: (iss) => (iss.input === 'docker' ? 'type "docker" was renamed; use type: container' : undefined),
});

function scalerEntryShape() {
  return {
    name: z.string().regex(SCALER_NAME_PATTERN, {
      error: (iss) =>
        `scaler name ${JSON.stringify(iss.input)} must be 1–63 letters, digits, ".", "_" or "-", starting with a letter or digit`,
    }),
    type: typeSchema,
    maxAgents: positiveInt.meta({ description: 'Population cap of this scaler.' }),
    maxConcurrentSpawns: positiveInt
      .default(DEFAULT_MAX_CONCURRENT_SPAWNS)
      .meta({ description: 'Spawns in flight at once for this backend.' }),
    labelSets: z.array(labelSetConfigSchema).min(1, { error: 'a scaler needs at least one label set' }),
    orchestratorUrl: z
      .string()
      .refine((v) => isUrlWithProtocol(v, ['ws:', 'wss:', 'http:', 'https:']), {
        error: (iss) => `"${String(iss.input)}" is not a ws://, wss://, http:// or https:// URL`,
      })
      .optional()
      .meta({ description: 'URL spawned agents dial.' }),
    extraHosts: z
      .array(z.string())
      .optional()
      .meta({ description: 'host:address entries, e.g. "registry.local:host-gateway".' }),
    networkIsolation: z.boolean().default(true),
    warmPool: warmPoolSchema.optional(),
    mandatoryLabels: z
      .array(labelSchema)
      .default([])
      .transform((labels) => labels.map(foldLabel))
      .meta({ description: 'Taints: a job reaches this scaler only when its runsOn names all of them.' }),
    platform: platformSchema.optional(),
    roles: z
      .array(z.enum(['builder', 'init-runner', 'all']))
      .optional()
      .transform(normalizeRoles)
      .meta({
        description: 'Internal job roles served besides execution. Absent or "all": every role; []: none.',
      }),
    resourceCap: resourceCapSchema.optional(),
    machinePool: nonEmptyString.optional().meta({ description: 'Name of a top-level machinePools[] entry.' }),
    host: nonEmptyString.optional().meta({ description: 'container: remote runtime, e.g. tcp://host:2376.' }),
    socketPath: nonEmptyString.optional().meta({ description: 'container: runtime socket path.' }),
    runtime: z.enum(['docker', 'podman', 'auto']).default('auto'),
    enforceCgroups: z
      .boolean()
      .default(false)
      .meta({ description: 'bare-metal: systemd-run scope with CPU/memory limits.' }),
    vmm: z.enum(['firecracker', 'qemu']).default('firecracker').meta({
      description: 'firecracker: the VMM behind the VM backend (qemu: qemu-system-x86_64 -M microvm).',
    }),
    qemuPath: nonEmptyString.optional().meta({
      description: 'firecracker with vmm qemu: the QEMU binary (qemu-system-x86_64 on PATH by default).',
    }),
    initrdPath: nonEmptyString
      .optional()
      .meta({ description: 'firecracker: the guest initramfs (scripts/build-vm-guest.sh builds one).' }),
    firecrackerPath: nonEmptyString.optional(),
    jailerPath: nonEmptyString.optional(),
    kernelPath: nonEmptyString.optional(),
    chrootBaseDir: nonEmptyString.default(DEFAULT_JAILER_CHROOT_BASE_DIR),
    uid: z.number().int().nonnegative().optional(),
    gid: z.number().int().nonnegative().optional(),
    vcpuCount: positiveInt.default(DEFAULT_FIRECRACKER_VCPU_COUNT),
    memSizeMib: positiveInt.default(DEFAULT_FIRECRACKER_MEM_SIZE_MIB),
    requireSudo: z
      .boolean()
      .default(false)
      .meta({ description: 'Run privileged host commands through sudo -n.' }),
    provisioningTargets: z
      .array(
        z.string().refine(isProvisioningTarget, {
          error: (iss) =>
            `"${String(iss.input)}" is not a provisioning target; expected job:<file> or webhook:<http(s) url> (a job:<file> is a relative path inside the config directory, without "..")`,
        }),
      )
      .optional()
      .meta({ description: 'event: where scale-up/scale-down events go (job:<file> or webhook:<url>).' }),
    claimTtlSeconds: positiveInt.default(DEFAULT_CLAIM_TTL_SECONDS),
    agentTokenTtlSeconds: positiveInt.default(DEFAULT_AGENT_TOKEN_TTL_SECONDS),
  };
}

/**
 * The entry schema. `hostPlatform` is where the file is loaded; it only matters for the
 * Windows batch-file rule and is injectable so that rule can be tested anywhere.
 */
export function createScalerEntrySchema(hostPlatform: NodeJS.Platform = process.platform) {
  return z.strictObject(scalerEntryShape()).superRefine(
    (entry, ctx) => {
      for (const issue of checkScalerEntryRules(entry as unknown as Record<string, unknown>, hostPlatform)) {
        ctx.addIssue({ code: 'custom', path: issue.path, message: issue.message });
      }
    },
    // Run even when a field already failed, so every problem is listed in one pass.
    { when: (payload) => isRecord(payload.value) },
  );
}
