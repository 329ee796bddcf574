import { describe, expect, it } from 'vitest';
import { formatCap, formatSummary, summarizeConfig } from '../../../src/config/index.js';
import { fileWith, minimalEntry, parsedOk } from './fixtures.js';

describe('summarizeConfig', () => {
  const config = parsedOk({
    ...fileWith(
      {
        ...minimalEntry('container', 'c'),
        resourceCap: { maxCpu: 4 },
        machinePool: 'p',
        warmPool: { enabled: true, size: 2 },
      },
      {
        ...minimalEntry('bare-metal', 'm'),
        platform: { os: 'macos', arch: 'arm64' },
        mandatoryLabels: ['xcode'],
        labelSets: [
          { labels: ['xcode', 'm'], binaryPath: '/a' },
          { labels: ['xcode', 'n'], binaryPath: '/a' },
        ],
      },
    ),
    globalMaxAgents: 10,
    globalResourceCap: { maxMemory: '8g' },
    machinePools: [{ name: 'p', cap: { maxCpu: 8 } }],
  });

  it('counts scalers, label sets and caps', () => {
    const s = summarizeConfig(config);
    expect(s.totals).toEqual({
      scalers: 2,
      labelSets: 3,
      maxAgents: 4,
      byType: { container: 1, 'bare-metal': 1 },
    });
    expect(s.globalResourceCap).toEqual({ maxMemoryBytes: 8 * 1024 ** 3 });
    expect(s.machinePools).toEqual([{ name: 'p', cap: { maxCpu: 8 } }]);
    expect(s.scalers[0]).toMatchObject({
      name: 'c',
      resourceCap: { maxCpu: 4 },
      machinePool: 'p',
      warmPool: { size: 2, idleTimeoutSeconds: 300 },
    });
    expect(s.scalers[1]).toMatchObject({
      labelSets: ['m,xcode', 'n,xcode'],
      platformTaints: ['macos', 'arm64'],
      mandatoryLabels: ['xcode'],
    });
  });

  it('formats a readable table', () => {
    const lines = formatSummary(summarizeConfig(config));
    expect(lines[0]).toBe('2 scaler(s) (1 container, 1 bare-metal), 3 label set(s)');
    expect(lines).toContain('globalResourceCap: 8 GiB');
    expect(lines).toContain('machine pool p: 8 cpu');
    expect(lines.find((l) => l.startsWith('m '))).toContain('xcode,macos,arm64');
  });

  it('formats caps', () => {
    expect(formatCap(undefined)).toBe('-');
    expect(formatCap({})).toBe('-');
    expect(formatCap({ maxCpu: 2, maxMemoryBytes: 1024 ** 3 })).toBe('2 cpu, 1 GiB');
  });

  it('an empty config summarises without a table', () => {
    expect(formatSummary(summarizeConfig(parsedOk(fileWith())))[0]).toBe('0 scaler(s), 0 label set(s)');
  });
});
