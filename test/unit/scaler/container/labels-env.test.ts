/** Container labels and environment. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { labelSetConfigSchema } from '../../../../src/config/label-set-schema.js';
import { containerEnv, containerLabels } from '../../../../src/scaler/backends/container/labels.js';

const ls = (extra: Record<string, unknown> = {}) =>
  labelSetConfigSchema.parse({ labels: ['Linux', 'big'], image: 'kici-agent:1', ...extra });

const envOf = (list: string[]) =>
  Object.fromEntries(list.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));

describe('containerLabels', () => {
  it('carries managed, scaler, agent id and the normalised label set, and the binding only when bound', () => {
    expect(containerLabels({ scalerName: 's1', agentId: 'a1', labelSet: ['linux', 'big'] })).toEqual({
      'kici-managed': 'true',
      'kici-scaler-name': 's1',
      'kici-agent-id': 'a1',
      'kici-labels': 'big,linux',
    });
    expect(
      containerLabels({ scalerName: 's1', agentId: 'a1', labelSet: ['x'], boundJobId: 'j1', runId: 'r1' }),
    ).toMatchObject({ 'kici-bound-job-id': 'j1', 'kici-run-id': 'r1' });
  });
});

describe('containerEnv', () => {
  const base = {
    orchestratorUrl: 'ws://172.30.0.1:1/ws',
    agentId: 'a1',
    fullLabels: ['big', 'linux', 'kici:scaler:s1'],
    hostEnv: {},
    jobImage: false,
  };

  it('sets the identity, scaler-managed mode and runtime image', () => {
    const env = envOf(containerEnv({ ...base, labelSet: ls({ backpressureMode: 'drop' }) }));
    expect(env).toMatchObject({
      KICI_ORCHESTRATOR_URL: 'ws://172.30.0.1:1/ws',
      KICI_AGENT_ID: 'a1',
      KICI_LABELS: 'big,linux,kici:scaler:s1',
      KICI_SCALER_MANAGED: '1',
      KICI_EXECUTION_MODE: 'bare-metal',
      KICI_RUNTIME_IMAGE: 'kici-agent:1',
      KICI_AGENT_TOKEN_FILE: '/tmp/.kici-handoff/agent-token',
      KICI_BACKPRESSURE_MODE: 'drop',
    });
    // The token is handed over as a file: never in what `docker inspect` and /proc show.
    expect(env).not.toHaveProperty('KICI_AGENT_TOKEN');
    const moved = envOf(
      containerEnv({
        ...base,
        labelSet: ls({ env: { KICI_AGENT_TOKEN: 'x', KICI_AGENT_TOKEN_FILE: '/etc/passwd' } }),
      }),
    );
    expect(moved.KICI_AGENT_TOKEN).toBeUndefined();
    expect(moved.KICI_AGENT_TOKEN_FILE).toBe('/tmp/.kici-handoff/agent-token');
    expect(env).not.toHaveProperty('KICI_JOB_IMAGE_AGENT');
    expect(envOf(containerEnv({ ...base, labelSet: ls(), jobImage: true })).KICI_JOB_IMAGE_AGENT).toBe('1');
  });

  it('forwards only KICI_AGENT_ENV_<X> from the orchestrator, and the label set env wins', () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.stringMatching(/^[A-Z][A-Z0-9_]{0,8}$/), fc.string({ maxLength: 8 })),
        (host) => {
          const hostEnv: NodeJS.ProcessEnv = { SECRET: 'no', PATH: '/x' };
          for (const [k, v] of Object.entries(host)) hostEnv[`KICI_AGENT_ENV_${k}`] = v;
          hostEnv.KICI_AGENT_ENV_SHARED = 'from-host';
          const env = envOf(
            containerEnv({ ...base, hostEnv, labelSet: ls({ env: { SHARED: 'from-set' } }) }),
          );
          expect(env).not.toHaveProperty('SECRET');
          expect(env).not.toHaveProperty('PATH');
          expect(env.SHARED).toBe('from-set');
          for (const [k, v] of Object.entries(host))
            if (k !== 'SHARED' && !k.startsWith('KICI_')) expect(env[k]).toBe(v);
        },
      ),
    );
  });
});
