import { describe, expect, it } from 'vitest';
import {
  mirrorResources,
  resourceCapSchema,
  resourceRequestSchema,
  SCALER_PARSE_PARAMS,
} from '../../../src/config/index.js';

describe('mirrorResources (a side given alone stands for both)', () => {
  const a = { cpus: 1, memory: '1g' };
  const b = { cpus: 2 };
  it.each([
    [undefined, undefined],
    [{}, undefined],
    [{ requests: a }, { requests: a, limits: a }],
    [{ limits: b }, { requests: b, limits: b }],
    [
      { requests: a, limits: b },
      { requests: a, limits: b },
    ],
  ])('%j -> %j', (input, output) => expect(mirrorResources(input)).toEqual(output));

  it('copies the mirrored side so the two are not one object', () => {
    const out = mirrorResources({ limits: { cpus: 1 } })!;
    expect(out.requests).not.toBe(out.limits);
  });
});

describe('resourceRequestSchema', () => {
  const parse = (v: unknown) => resourceRequestSchema.safeParse(v, SCALER_PARSE_PARAMS);

  it('mirrors a single side into the output', () => {
    expect(parse({ limits: { cpus: 2, memory: '4g' } }).data).toEqual({
      requests: { cpus: 2, memory: '4g' },
      limits: { cpus: 2, memory: '4g' },
    });
  });

  it('keeps memory as the string written', () => {
    expect(parse({ requests: { memory: '512 M' } }).data?.requests?.memory).toBe('512 M');
  });

  it.each([
    [{ cpus: 2 }, '"cpus" cannot sit directly under resources; nest it under limits'],
    [{ memory: '1g' }, '"memory" cannot sit directly under resources'],
    [{ cpus: 2, memory: '1g' }, 'nest them under limits'],
  ])('refuses the flat form %j', (input, message) => {
    const result = parse(input);
    expect(result.success).toBe(false);
    expect(result.error!.issues[0]!.message).toContain(message);
    expect(result.error!.issues[0]!.message).toContain('a limit alone also sets the request');
  });

  it.each([
    [{ limits: { cpus: 0 } }, ['limits', 'cpus'], 'greater than 0'],
    [{ limits: { cpus: 257 } }, ['limits', 'cpus'], 'at most 256'],
    [{ requests: { memory: '4Gi' } }, ['requests', 'memory'], 'Invalid memory format: "4Gi"'],
    [{ requests: { memory: 4 } }, ['requests', 'memory'], 'expected a string'],
    [{ limits: { gpus: 1 } }, ['limits'], 'unknown key "gpus"'],
    [{ other: 1 }, [], 'unknown key "other"'],
  ])('rejects %j at %j', (input, path, message) => {
    const issue = parse(input).error!.issues[0]!;
    expect(issue.path).toEqual(path);
    expect(issue.message).toContain(message);
  });

  it('accepts cpus exactly 256 and fractional cpus', () => {
    expect(parse({ limits: { cpus: 256 } }).success).toBe(true);
    expect(parse({ limits: { cpus: 0.5 } }).success).toBe(true);
  });
});

describe('resourceCapSchema', () => {
  const parse = (v: unknown) => resourceCapSchema.safeParse(v, SCALER_PARSE_PARAMS);

  it.each([
    [{}, {}],
    [{ maxCpu: 4 }, { maxCpu: 4 }],
    [{ maxMemory: '2g' }, { maxMemoryBytes: 2 * 1024 ** 3 }],
    [
      { maxCpu: 0.5, maxMemory: '512m' },
      { maxCpu: 0.5, maxMemoryBytes: 512 * 1024 ** 2 },
    ],
  ])('%j -> %j', (input, output) => expect(parse(input).data).toEqual(output));

  it.each([
    [
      { maxMemory: 'lots' },
      ['maxMemory'],
      'Invalid memory format: "lots". Expected format like "512m", "2g", or "1024k".',
    ],
    [{ maxCpu: 0 }, ['maxCpu'], 'greater than 0'],
    [{ maxCpu: -1 }, ['maxCpu'], 'greater than 0'],
    [{ maxMemoryBytes: 5 }, [], 'unknown key "maxMemoryBytes"'],
  ])('rejects %j', (input, path, message) => {
    const issue = parse(input).error!.issues[0]!;
    expect(issue.path).toEqual(path);
    expect(issue.message).toContain(message);
  });
});
