import { describe, expect, it } from 'vitest';
import { scalerConfigJsonSchema } from '../../../src/config/index.js';

type Schema = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe('scalerConfigJsonSchema', () => {
  const schema = scalerConfigJsonSchema() as Schema;
  const entry = schema.properties.scalers.items as Schema;
  const labelSet = entry.properties.labelSets.items as Schema;

  it('is a draft-07 object schema of the input side', () => {
    expect(schema.$schema).toBe('http://json-schema.org/draft-07/schema#');
    expect(schema.type).toBe('object');
    expect(schema.required).toEqual(expect.arrayContaining(['version', 'scalers']));
    // Defaulted fields are optional on the input side.
    expect(schema.required).not.toContain('globalMaxAgents');
    expect(schema.properties.globalMaxAgents.default).toBe(50);
  });

  it('describes entries strictly with every backend type and defaults', () => {
    expect(entry.additionalProperties).toBe(false);
    expect(entry.properties.type.enum).toEqual(['container', 'bare-metal', 'firecracker', 'event']);
    expect(entry.required).toEqual(expect.arrayContaining(['name', 'type', 'maxAgents', 'labelSets']));
    expect(entry.properties.maxConcurrentSpawns.default).toBe(8);
    expect(entry.properties.roles.items.enum).toEqual(['builder', 'init-runner', 'all']);
  });

  it('shows resources as written (requests/limits with memory strings), not as parsed', () => {
    const resources = labelSet.properties.resources as Schema;
    expect(Object.keys(resources.properties)).toEqual(['requests', 'limits']);
    expect(resources.additionalProperties).toBe(false);
    expect(resources.properties.limits.properties.memory.type).toBe('string');
    const cap = entry.properties.resourceCap as Schema;
    expect(Object.keys(cap.properties)).toEqual(['maxCpu', 'maxMemory']);
  });

  it('validates the memory pattern like the loader', () => {
    const pattern = new RegExp(labelSet.properties.resources.properties.limits.properties.memory.pattern);
    expect(pattern.test('512m')).toBe(true);
    expect(pattern.test('2Gi')).toBe(false);
  });

  it('is plain JSON', () => {
    expect(JSON.parse(JSON.stringify(schema))).toEqual(schema);
  });
});
