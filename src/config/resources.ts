/**
 * Resource requests/limits (per label set and `defaults.resources`) and resource caps
 * (per scaler, global, per machine pool).
 */
import { z } from 'zod';
import { MEMORY_PATTERN, memoryFormatMessage, parseMemoryString } from './memory.js';

/**
 * A memory string, checked at load so a typo ("4Gi") is reported with the file instead of
 * failing the first spawn. The value stays a string; consumers parse it when they bill.
 */
export const memoryStringSchema = z
  .string()
  .regex(MEMORY_PATTERN, { error: (iss) => memoryFormatMessage(iss.input) })
  .refine((v) => !MEMORY_PATTERN.test(v) || Number.isFinite(safeParseMemory(v)), {
    error: (iss) => memoryFormatMessage(iss.input),
  })
  .meta({ description: 'Binary units, suffix k, m or g (any case): "512m", "2g", "1.5G".' });

function safeParseMemory(value: string): number {
  try {
    return parseMemoryString(value);
  } catch {
    return NaN;
  }
}

export const resourceSpecSchema = z.strictObject({
  cpus: z
    .number()
    .positive()
    .max(256)
    .optional()
    .meta({ description: 'CPUs (fractions allowed), 0 < cpus <= 256.' }),
  memory: memoryStringSchema.optional(),
});

const FLAT_KEYS = new Set(['cpus', 'memory']);

/** Refuse the pre-0.16 flat shorthand with a message that says how to write it now. */
function flatResourcesMessage(iss: { code?: string; keys?: string[] }): string | undefined {
  if (iss.code !== 'unrecognized_keys' || !iss.keys?.some((k) => FLAT_KEYS.has(k))) return undefined;
  const keys = iss.keys.map((k) => `"${k}"`).join(', ');
  const them = iss.keys.length > 1 ? 'them' : 'it';
  return `${keys} cannot sit directly under resources; nest ${them} under limits (resources: { limits: { cpus: 2, memory: 4g } }) — a limit alone also sets the request`;
}

/** The request/limit block as written; the exported schema adds the mirror below. */
const resourceRequestObjectSchema = z.strictObject(
  {
    requests: resourceSpecSchema.optional().meta({ description: 'What caps bill. Alone, also the limit.' }),
    limits: resourceSpecSchema
      .optional()
      .meta({ description: 'What the backend enforces. Alone, also the request.' }),
  },
  { error: flatResourcesMessage },
);

export type ResourceSpec = z.output<typeof resourceSpecSchema>;
export type ResourceRequest = z.output<typeof resourceRequestObjectSchema>;

/**
 * Mirror: a side given alone stands for both, so consumers always see requests (what caps bill) and
 * limits (what backends enforce). Neither side -> undefined.
 */
export function mirrorResources(r: ResourceRequest | undefined): ResourceRequest | undefined {
  if (!r || (r.requests === undefined && r.limits === undefined)) return undefined;
  if (r.requests !== undefined && r.limits !== undefined) return { requests: r.requests, limits: r.limits };
  const side = (r.requests ?? r.limits)!;
  return { requests: { ...side }, limits: { ...side } };
}

export const resourceRequestSchema = resourceRequestObjectSchema.transform((r) => mirrorResources(r));

/** Caps are written with a memory string and used in bytes, so the parse happens once here. */
export const resourceCapSchema = z
  .strictObject({
    maxCpu: z.number().positive().optional().meta({ description: 'Cap on summed CPU requests.' }),
    maxMemory: memoryStringSchema
      .optional()
      .meta({ description: 'Cap on summed memory requests, e.g. "64g".' }),
  })
  // Only the keys that were given, so `{}` stays `{}`.
  .transform(({ maxCpu, maxMemory }) => ({
    ...(maxCpu !== undefined && { maxCpu }),
    ...(maxMemory !== undefined && { maxMemoryBytes: parseMemoryString(maxMemory) }),
  }));

export type ResourceCap = z.output<typeof resourceCapSchema>;
