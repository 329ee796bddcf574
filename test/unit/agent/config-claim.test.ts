import { describe, expect, it } from 'vitest';
import { AgentConfigError, readAgentConfig } from '../../../src/agent/config.js';

describe('agent config with a claim code', () => {
  const url = 'ws://127.0.0.1:1/ws';
  it('needs no id or token when KICI_SCALER_CLAIM_CODE is set', () => {
    const cfg = readAgentConfig({ KICI_ORCHESTRATOR_URL: url, KICI_SCALER_CLAIM_CODE: 'c-1' });
    expect(cfg).toMatchObject({ claimCode: 'c-1', agentId: '', token: '' });
  });
  it('uses the token, not the code, when both are set', () => {
    const cfg = readAgentConfig({
      KICI_ORCHESTRATOR_URL: url,
      KICI_AGENT_ID: 'a-1',
      KICI_AGENT_TOKEN: 't',
      KICI_SCALER_CLAIM_CODE: 'c-1',
    });
    expect(cfg.claimCode).toBeUndefined();
    expect(cfg.token).toBe('t');
  });
  it('still names what is missing without either', () => {
    expect(() => readAgentConfig({ KICI_ORCHESTRATOR_URL: url })).toThrow(AgentConfigError);
    expect(() => readAgentConfig({ KICI_ORCHESTRATOR_URL: url })).toThrow(/KICI_AGENT_ID, KICI_AGENT_TOKEN/);
  });
});
