/** KICI_AGENT_HEARTBEAT_MS: how often agents are told to heartbeat, read and bounded at start-up. */
import { afterEach, describe, expect, it } from 'vitest';
import { agentHeartbeatMs } from '../../../src/server/orchestrator-options.js';
import { UserError } from '../../../src/util/errors.js';

afterEach(() => {
  delete process.env.KICI_AGENT_HEARTBEAT_MS;
});

describe('agent heartbeat interval', () => {
  it('is 10 s by default, the variable when set, and the option over both', () => {
    expect(agentHeartbeatMs({})).toBe(10_000);
    process.env.KICI_AGENT_HEARTBEAT_MS = '1000';
    expect(agentHeartbeatMs({})).toBe(1_000);
    expect(agentHeartbeatMs({ heartbeatIntervalMs: 250 })).toBe(250);
  });

  it('refuses a value out of range or not whole, naming the variable', () => {
    for (const bad of ['99', '600001', '1.5', 'soon']) {
      process.env.KICI_AGENT_HEARTBEAT_MS = bad;
      expect(() => agentHeartbeatMs({})).toThrow(UserError);
      expect(() => agentHeartbeatMs({})).toThrow(/KICI_AGENT_HEARTBEAT_MS/);
    }
  });
});
