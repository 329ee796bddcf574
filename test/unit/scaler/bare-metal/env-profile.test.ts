/**
 * Env profiles: the default allowlist, the trusted profile (host env minus the scrub list),
 * forwarded KICI_AGENT_ENV_*, then our variables, then the label set's env.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { LabelSetConfig } from '../../../../src/config/index.js';
import { buildAgentEnv, ENV_ALLOWLIST, scrubbed } from '../../../../src/scaler/backends/bare-metal/env.js';

const id = {
  orchestratorUrl: 'ws://127.0.0.1:9/ws',
  agentId: 'scaler-bare-metal-0000aaaa',
  fullLabels: ['linux', 'kici:scaler:bm'],
};
const set = (over: Partial<LabelSetConfig> = {}): LabelSetConfig =>
  ({ labels: ['linux'], imagePullPolicy: 'IfNotPresent', containerSocket: false, ...over }) as LabelSetConfig;

const SECRETS = {
  KICI_ADMIN_TOKEN: 'admin',
  KICI_DATABASE_URL: 'postgres://u:p@db/k',
  KICI_AGENT_TOKEN: 'orchestrator-own-token',
  KICI_SCALER_CLAIM_CODE: 'c0de',
  KICI_DATA_DIR: '/var/lib/kici',
  KICI_WEBHOOK_SECRET: 'whsec',
  KICI_SIGNING_KEY: 'k',
  PGPASSWORD: 'pw',
  PGUSER: 'kici',
  PGHOST: 'db',
  DATABASE_URL: 'postgres://x',
};
const HOST = {
  PATH: '/usr/bin:/bin',
  HOME: '/root',
  LANG: 'C.UTF-8',
  TZ: 'UTC',
  EDITOR: 'vi',
  AWS_PROFILE: 'prod',
  SSH_AUTH_SOCK: '/tmp/ssh-agent',
  ...SECRETS,
};

describe('bare-metal env profiles', () => {
  it('default profile: only allowlisted host variables cross over', () => {
    const { env, trusted } = buildAgentEnv(HOST, set(), id);
    expect(trusted).toBe(false);
    expect(env).toMatchObject({ PATH: '/usr/bin:/bin', HOME: '/root', LANG: 'C.UTF-8', TZ: 'UTC' });
    for (const k of ['EDITOR', 'AWS_PROFILE', 'SSH_AUTH_SOCK', ...Object.keys(SECRETS)])
      expect(env, k).not.toHaveProperty(k);
    // Neither the orchestrator's token nor the agent's own: the agent's comes down a descriptor.
    expect(env).not.toHaveProperty('KICI_AGENT_TOKEN');
    expect(env.KICI_AGENT_TOKEN_FD).toBe('3');
  });

  it('the allowlist is exactly the documented list (POSIX and Windows names)', () => {
    expect([...ENV_ALLOWLIST].sort()).toEqual(
      [
        'PATH',
        'HOME',
        'USER',
        'SHELL',
        'LANG',
        'LC_ALL',
        'TERM',
        'TMPDIR',
        'NODE_PATH',
        'TZ',
        'PATHEXT',
        'SystemRoot',
        'windir',
        'COMSPEC',
        'TEMP',
        'TMP',
        'USERPROFILE',
        'LOCALAPPDATA',
        'APPDATA',
        'PROCESSOR_ARCHITECTURE',
        'NUMBER_OF_PROCESSORS',
      ].sort(),
    );
  });

  it('property: with any host env, the default profile holds nothing outside allowlist + forwarded + ours + label set', () => {
    const name = fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,12}$/);
    fc.assert(
      fc.property(fc.dictionary(name, fc.string({ maxLength: 8 })), (host) => {
        const { env } = buildAgentEnv(host, set({ env: { FROM_SET: '1' } }), id);
        const forwarded = Object.keys(host)
          .filter((k) => k.startsWith('KICI_AGENT_ENV_') && k.length > 15)
          .map((k) => k.slice(15));
        for (const k of Object.keys(env)) {
          const ok =
            (ENV_ALLOWLIST as readonly string[]).includes(k) ||
            forwarded.includes(k) ||
            k.startsWith('KICI_') ||
            k === 'FROM_SET';
          if (!ok) return false;
        }
        return true;
      }),
    );
  });

  it('trusted profile (label set or forwarded KICI_TRUSTED_ENV=true): host env minus the scrub list', () => {
    for (const [host, ls] of [
      [HOST, set({ env: { KICI_TRUSTED_ENV: 'true' } })],
      [{ ...HOST, KICI_AGENT_ENV_KICI_TRUSTED_ENV: 'true' }, set()],
    ] as const) {
      const { env, trusted } = buildAgentEnv(host, ls, id);
      expect(trusted).toBe(true);
      expect(env).toMatchObject({ EDITOR: 'vi', AWS_PROFILE: 'prod', SSH_AUTH_SOCK: '/tmp/ssh-agent' });
      for (const k of Object.keys(SECRETS)) expect(env, k).not.toHaveProperty(k);
      expect(env.KICI_AGENT_TOKEN_FD).toBe('3');
      // The raw forwarding form never crosses; its payload does, under its own name.
      expect(Object.keys(env).some((k) => k.startsWith('KICI_AGENT_ENV_'))).toBe(false);
    }
    // "true" exactly: anything else keeps the default profile.
    expect(buildAgentEnv(HOST, set({ env: { KICI_TRUSTED_ENV: '1' } }), id).trusted).toBe(false);
  });

  it('the scrub list catches every KiCI secret-like name and leaves ordinary names alone', () => {
    for (const k of Object.keys(SECRETS)) expect(scrubbed(k), k).toBe(true);
    expect(scrubbed('KICI_AGENT_ENV_FOO')).toBe(true);
    for (const k of ['PATH', 'EDITOR', 'GITHUB_SHA', 'KICI_LOG_LEVEL', 'NPM_CONFIG_CACHE'])
      expect(scrubbed(k), k).toBe(false);
  });

  it('forwarding: KICI_AGENT_ENV_<X>=v becomes <X>=v; an empty suffix is ignored', () => {
    const { env } = buildAgentEnv({ ...HOST, KICI_AGENT_ENV_FOO: 'bar', KICI_AGENT_ENV_: 'x' }, set(), id);
    expect(env.FOO).toBe('bar');
    expect(Object.keys(env)).not.toContain('');
    expect(env).not.toHaveProperty('KICI_AGENT_ENV_FOO');
  });

  it('precedence: host < forwarded < ours < label-set env', () => {
    const host = {
      ...HOST,
      LANG: 'host',
      KICI_AGENT_ENV_LANG: 'forwarded',
      KICI_AGENT_ENV_KICI_AGENT_ID: 'forged',
      KICI_AGENT_ENV_ONLY_FWD: 'f',
    };
    // Forwarded beats the host.
    expect(buildAgentEnv(host, set(), id).env.LANG).toBe('forwarded');
    // Ours beat forwarded.
    expect(buildAgentEnv(host, set(), id).env.KICI_AGENT_ID).toBe(id.agentId);
    // The label set beats all of them.
    const { env } = buildAgentEnv(host, set({ env: { LANG: 'set', KICI_PORT: '7', ONLY_FWD: 's' } }), id);
    expect(env).toMatchObject({ LANG: 'set', KICI_PORT: '7', ONLY_FWD: 's' });
  });

  it('our variables: identity, labels, mode; KICI_RUNTIME_IMAGE only with an image', () => {
    const plain = buildAgentEnv(HOST, set({ backpressureMode: 'drop' }), id).env;
    expect(plain).toMatchObject({
      KICI_ORCHESTRATOR_URL: id.orchestratorUrl,
      KICI_AGENT_ID: id.agentId,
      KICI_LABELS: 'linux,kici:scaler:bm',
      KICI_SCALER_MANAGED: '1',
      KICI_EXECUTION_MODE: 'bare-metal',
      KICI_PORT: '0',
      KICI_BACKPRESSURE_MODE: 'drop',
    });
    expect(plain).not.toHaveProperty('KICI_RUNTIME_IMAGE');
    expect(buildAgentEnv(HOST, set({ image: 'img:1' }), id).env.KICI_RUNTIME_IMAGE).toBe('img:1');
  });
});
