/**
 * The scaler configuration file and its Firecracker network block; the label-set and entry schemas
 * live next door. Types are derived from the schemas.
 */
import { z } from 'zod';
import { ipv4ToNumber, parseIpv4Cidr, prefixToMask } from './addresses.js';
import { DEFAULT_FIRECRACKER_NETWORK, DEFAULT_GLOBAL_MAX_AGENTS } from './defaults.js';
import { createScalerEntrySchema } from './entry-schema.js';
import { nonEmptyString, positiveInt } from './label-set-schema.js';
import type { labelSetConfigSchema, networkPolicySchema } from './label-set-schema.js';
import { resourceCapSchema, resourceRequestSchema } from './resources.js';

export { DEFAULT_MAX_CONCURRENT_SPAWNS } from './defaults.js';
export { labelSetConfigSchema, networkPolicySchema } from './label-set-schema.js';
export { SCALER_TYPES, type ScalerType } from './entry-schema.js';

const ipv4Schema = z.string().refine((v) => ipv4ToNumber(v) !== undefined, {
  error: (iss) => `"${String(iss.input)}" is not an IPv4 address`,
});

/**
 * Global across all Firecracker scalers on the orchestrator.
 */
export const firecrackerNetworkSchema = z
  .object({
    cidr: z
      .string()
      .refine((v) => parseIpv4Cidr(v) !== undefined, {
        error: (iss) => `"${String(iss.input)}" is not an IPv4 CIDR`,
      })
      .default(DEFAULT_FIRECRACKER_NETWORK.cidr),
    bridgeName: z
      .string()
      .regex(/^[A-Za-z0-9_.-]{1,15}$/, { error: 'a bridge name is 1–15 letters, digits, ".", "_" or "-"' })
      .default(DEFAULT_FIRECRACKER_NETWORK.bridgeName),
    gateway: ipv4Schema.default(DEFAULT_FIRECRACKER_NETWORK.gateway),
    netmask: ipv4Schema.default(DEFAULT_FIRECRACKER_NETWORK.netmask),
    table: z
      .string()
      .regex(/^[A-Za-z][A-Za-z0-9_.-]{0,63}$/, {
        error: 'an nft table name starts with a letter: letters, digits, ".", "_", "-"',
      })
      .default(DEFAULT_FIRECRACKER_NETWORK.table)
      .meta({ description: 'nft table for this bridge; give each bridge its own.' }),
    autoProvisionHost: z.boolean().default(DEFAULT_FIRECRACKER_NETWORK.autoProvisionHost),
  })
  .superRefine(
    (net, ctx) => {
      // The three fields describe one subnet; disagreeing values would route guests nowhere.
      const cidr = parseIpv4Cidr(net.cidr);
      const gateway = ipv4ToNumber(net.gateway);
      const netmask = ipv4ToNumber(net.netmask);
      if (!cidr) return;
      const mask = prefixToMask(cidr.prefix);
      if (gateway !== undefined && ((gateway & mask) >>> 0 !== cidr.network || gateway === cidr.network)) {
        ctx.addIssue({
          code: 'custom',
          path: ['gateway'],
          message: `gateway ${net.gateway} is not a host address in ${net.cidr}`,
        });
      }
      if (netmask !== undefined && netmask !== mask) {
        ctx.addIssue({
          code: 'custom',
          path: ['netmask'],
          message: `netmask ${net.netmask} does not match the /${cidr.prefix} of ${net.cidr}`,
        });
      }
    },
    { when: (payload) => isRecord(payload.value) && typeof payload.value.cidr === 'string' },
  );

export const machinePoolSchema = z.strictObject({
  name: nonEmptyString.meta({ description: 'Referenced by scalers[].machinePool.' }),
  cap: resourceCapSchema,
});

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Machine-pool references and unique pool names, on the partly parsed file. */
function checkFileRules(file: Record<string, unknown>, ctx: z.RefinementCtx): void {
  const declared = new Map<string, number>();
  if (Array.isArray(file.machinePools)) {
    file.machinePools.forEach((pool, i) => {
      if (!isRecord(pool) || typeof pool.name !== 'string') return;
      if (declared.has(pool.name)) {
        ctx.addIssue({
          code: 'custom',
          path: ['machinePools', i, 'name'],
          message: `machine pool "${pool.name}" is already defined at machinePools[${declared.get(pool.name)}]`,
        });
      } else declared.set(pool.name, i);
    });
  }
  if (!Array.isArray(file.scalers)) return;
  file.scalers.forEach((entry, i) => {
    if (!isRecord(entry) || typeof entry.machinePool !== 'string' || entry.machinePool === '') return;
    if (!declared.has(entry.machinePool)) {
      ctx.addIssue({
        code: 'custom',
        path: ['scalers', i, 'machinePool'],
        message: `references unknown machinePool "${entry.machinePool}"; define it under top-level machinePools[]`,
      });
    }
  });
}

export interface ScalerFileSchemaOptions {
  /** Host the file is loaded on; only the Windows batch-file rule depends on it. */
  hostPlatform?: NodeJS.Platform;
}

export function createScalerFileSchema(opts: ScalerFileSchemaOptions = {}) {
  return z
    .object({
      version: z.literal(1, {
        error: (iss) =>
          iss.input === undefined
            ? 'required: add version: 1'
            : `must be 1, got ${JSON.stringify(iss.input)}`,
      }),
      globalMaxAgents: positiveInt
        .default(DEFAULT_GLOBAL_MAX_AGENTS)
        .meta({ description: 'Agent-count cap across all scalers of one orchestrator.' }),
      defaults: z.object({ resources: resourceRequestSchema.optional() }).optional(),
      globalResourceCap: resourceCapSchema
        .optional()
        .meta({ description: 'Cap on summed requests across this orchestrator.' }),
      machinePools: z.array(machinePoolSchema).optional(),
      scalers: z.array(createScalerEntrySchema(opts.hostPlatform)),
      firecracker: firecrackerNetworkSchema.optional(),
    })
    .superRefine((file, ctx) => checkFileRules(file as unknown as Record<string, unknown>, ctx), {
      when: (payload) => isRecord(payload.value),
    });
}

export const scalerFileSchema = createScalerFileSchema();

export type ScalerConfig = z.output<typeof scalerFileSchema>;
export type ScalerConfigInput = z.input<typeof scalerFileSchema>;
export type ScalerEntry = ScalerConfig['scalers'][number];
export type LabelSetConfig = z.output<typeof labelSetConfigSchema>;
export type NetworkPolicy = NonNullable<z.output<typeof networkPolicySchema>>;
export type FirecrackerNetwork = z.output<typeof firecrackerNetworkSchema>;
export type MachinePool = z.output<typeof machinePoolSchema>;
export type WarmPoolConfig = NonNullable<ScalerEntry['warmPool']>;
