import { execFileSync } from 'node:child_process';
import fc from 'fast-check';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { labelSetConfigSchema } from '../../../../src/config/label-set-schema.js';
import {
  buildGuestEnv,
  GUEST_ENV_BUDGET_BYTES,
  guestOrchestratorUrl,
} from '../../../../src/scaler/backends/firecracker/guest-env.js';

const log = pino({ level: 'silent' });
const id = {
  orchestratorUrl: 'ws://10.0.0.1:8080/ws',
  agentId: 'scaler-vm-0a1b2c3d',
  auth: { kind: 'token' as const, token: "t'ok$en" },
  fullLabels: ['linux', 'vm'],
  gatewayIp: '10.0.0.1',
};

/** What /bin/sh makes of the file the guest sources. */
function sourced(text: string): Record<string, string> {
  const out = execFileSync('/bin/sh', ['-c', 'set -a; eval "$1"; env -0', 'sh', text]).toString('utf8');
  return Object.fromEntries(
    out
      .split('\0')
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
  );
}

describe('the guest agent environment', () => {
  it('any value survives the shell quoting the guest sources it with', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: 'grapheme', maxLength: 40 }).filter((v) => !v.includes('\0')),
        (v) => {
          const ls = labelSetConfigSchema.parse({ labels: ['x'], rootfsPath: '/r', env: { EXTRA: v } });
          expect(sourced(buildGuestEnv(id, ls, {}, log)).EXTRA).toBe(v);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('identity first; forwarded KICI_AGENT_ENV_* overlaid by the label set; bad keys and the identity are not overridable', () => {
    const ls = labelSetConfigSchema.parse({
      labels: ['x'],
      rootfsPath: '/r',
      env: { A: 'from-set' },
    });
    const env = sourced(
      buildGuestEnv(
        id,
        ls,
        {
          KICI_AGENT_ENV_A: 'host',
          KICI_AGENT_ENV_B: 'host-b',
          'KICI_AGENT_ENV_BAD-KEY': 'x',
          KICI_AGENT_ENV_KICI_AGENT_TOKEN: 'stolen',
          OTHER: 'no',
        },
        log,
      ),
    );
    expect(env.KICI_AGENT_TOKEN).toBe("t'ok$en");
    expect(env.KICI_AGENT_ID).toBe(id.agentId);
    expect(env.KICI_LABELS).toBe('linux,vm');
    expect(env.KICI_SCALER_MANAGED).toBe('1');
    expect(env.A).toBe('from-set');
    expect(env.B).toBe('host-b');
    expect(env.OTHER).toBeUndefined();
    expect(env['BAD-KEY']).toBeUndefined();
  });

  it('entries beyond the 32 KiB budget are skipped', () => {
    const big = 'x'.repeat(20_000);
    const ls = labelSetConfigSchema.parse({
      labels: ['x'],
      rootfsPath: '/r',
      env: { ONE: big, TWO: big, THREE: 'small' },
    });
    const env = sourced(buildGuestEnv(id, ls, {}, log));
    expect(env.ONE).toBe(big);
    expect(env.TWO).toBeUndefined();
    expect(env.THREE).toBe('small');
    expect(GUEST_ENV_BUDGET_BYTES).toBe(32_768);
  });

  it('a loopback orchestrator URL is rewritten to the bridge gateway; others are kept', () => {
    expect(guestOrchestratorUrl('ws://127.0.0.1:4000/ws', '10.0.0.1')).toEqual({
      url: 'ws://10.0.0.1:4000/ws',
      host: '10.0.0.1',
      port: 4000,
    });
    expect(guestOrchestratorUrl('wss://ci.example.org/ws', '10.0.0.1').host).toBe('ci.example.org');
  });
});
