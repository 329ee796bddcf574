/** Label sets and their network policy. */
import { z } from 'zod';
import { isAddressOrCidr, parseHostAccessEntry } from './addresses.js';
import { canonicalizeLabels, foldLabel, hasReservedPrefix, RESERVED_LABEL_PREFIX } from './labels.js';
import { resourceRequestSchema } from './resources.js';

/** A path, image reference or similar: an empty string is always a mistake. */
export const nonEmptyString = z.string().min(1, { error: 'must not be empty' });

export const positiveInt = z.number().int().positive();

/** One configured label: not blank, not reserved, no ',' (the set identity joins with ','). */
export const labelSchema = z
  .string()
  .refine((v) => foldLabel(v) !== '', { error: 'a label must not be empty or blank' })
  .refine((v) => !hasReservedPrefix(v), {
    error: (iss) =>
      `"${String(iss.input)}" uses the reserved "${RESERVED_LABEL_PREFIX}" prefix; those labels are set by KiCI itself`,
  })
  .refine((v) => !v.includes(','), {
    error: (iss) => `"${String(iss.input)}" contains ","; a label cannot contain commas`,
  });

/**
 * A label set's RFC1918 and internet access for spawned agents.
 */
export const networkPolicySchema = z
  .object({
    allowlist: z
      .array(
        z
          .string()
          .refine(isAddressOrCidr, { error: (iss) => `"${String(iss.input)}" is not an IP address or CIDR` }),
      )
      .optional()
      .meta({ description: 'CIDRs accepted before the private-range drops, e.g. ["10.1.2.0/24"].' }),
    denyAll: z.boolean().default(false).meta({ description: 'After the accepts, drop everything else.' }),
    hostAccess: z
      .array(
        z.string().refine((v) => parseHostAccessEntry(v) !== undefined, {
          error: (iss) =>
            `"${String(iss.input)}" is not <cidr | address | *>[:<port | *>] or a port (host names are not allowed)`,
        }),
      )
      .optional()
      .meta({
        description:
          'Services on the orchestrator host the agent may reach; replaces the default set. [] denies all.',
      }),
  })
  .optional();

const volumeSchema = z.string().regex(/^[^:\s]+:[^:\s]+(:(ro|rw))?$/, {
  error: (iss) => `"${String(iss.input)}" is not a bind mount; expected host:container or host:container:ro`,
});

const envNameSchema = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, {
  error: (iss) => `"${String(iss.input)}" is not an environment variable name`,
});

export const labelSetConfigSchema = z.strictObject({
  labels: z
    .array(labelSchema)
    .min(1, { error: 'a label set needs at least one label' })
    .transform((labels) => canonicalizeLabels(labels))
    .meta({
      description: 'Labels a job’s runsOn must be a subset of. Folded to lowercase, de-duplicated, sorted.',
    }),
  image: nonEmptyString
    .optional()
    .meta({ description: 'Agent image (container: required; bare-metal: job-image mode).' }),
  imagePullPolicy: z.enum(['Always', 'IfNotPresent', 'Never']).default('IfNotPresent'),
  binaryPath: nonEmptyString.optional().meta({ description: 'bare-metal: the agent executable.' }),
  resources: resourceRequestSchema.optional(),
  volumes: z
    .array(volumeSchema)
    .optional()
    .meta({ description: 'container: bind mounts, host:container[:ro].' }),
  containerSocket: z
    .boolean()
    .default(false)
    .meta({ description: 'Mount the runtime socket into the agent container. Dangerous: root on the host.' }),
  env: z
    .record(envNameSchema, z.string())
    .optional()
    .meta({ description: 'Extra environment for spawned agents.' }),
  backpressureMode: z.enum(['pause', 'drop']).optional(),
  runAsUser: z.enum(['dynamic']).optional().meta({
    description:
      'bare-metal (extension): run each agent as its own unprivileged uid with a 0700 home (root, or the uid-switch capabilities).',
  }),
  trust: z.enum(['host']).optional().meta({
    description:
      "bare-metal: `host` runs jobs unconfined, with the orchestrator user's access (its data dir, admin token, home). Trusted builds only; without it jobs are confined by per-agent users or the bubblewrap sandbox, whichever the host allows.",
  }),
  networkPolicy: networkPolicySchema,
  rootfsPath: nonEmptyString.optional().meta({ description: 'firecracker: rootfs ext4 image (required).' }),
  kernelPath: nonEmptyString.optional().meta({ description: 'firecracker: per-set kernel override.' }),
  vcpuCount: positiveInt.optional(),
  memSizeMib: positiveInt.optional(),
  overlayDriveSizeMib: positiveInt
    .optional()
    .meta({ description: 'firecracker: writable overlay size (2048 when unset).' }),
});
