/**
 * JSON Schema of the input side of scalers.yaml, for editors (YAML language server).
 * Refinements and transforms cannot be expressed there; the loader still checks them.
 */
import { z } from 'zod';
import { scalerFileSchema } from './schema.js';

export const SCALER_CONFIG_SCHEMA_ID = 'https://kici.dev/schemas/scalers.schema.json';

export function scalerConfigJsonSchema(): Record<string, unknown> {
  const schema = z.toJSONSchema(scalerFileSchema, {
    io: 'input',
    // draft-07 is what the YAML language server understands best.
    target: 'draft-07',
    unrepresentable: 'any',
  }) as Record<string, unknown>;
  return {
    ...schema,
    $id: SCALER_CONFIG_SCHEMA_ID,
    title: 'KiCI scaler configuration (scalers.yaml and scalers.d/*.yaml)',
  };
}
