import { describe, expect, it } from 'vitest';
import { DEFAULT_DRAIN_TIMEOUT_SECONDS, parseDrainTimeout } from '../../../src/cli/serve.js';

describe('--drain-timeout / KICI_DRAIN_TIMEOUT', () => {
  it('defaults when unset and accepts seconds, fractions and 0', () => {
    expect(parseDrainTimeout(undefined)).toBe(DEFAULT_DRAIN_TIMEOUT_SECONDS);
    expect(parseDrainTimeout('')).toBe(DEFAULT_DRAIN_TIMEOUT_SECONDS);
    expect(parseDrainTimeout('120')).toBe(120);
    expect(parseDrainTimeout('0.5')).toBe(0.5);
    expect(parseDrainTimeout('0')).toBe(0);
  });

  it('refuses what is not a sane number of seconds, naming the flag', () => {
    for (const bad of ['abc', '-1', '1e9', 'Infinity', '10s'])
      expect(() => parseDrainTimeout(bad)).toThrow(/^--drain-timeout: expected seconds/);
  });
});
