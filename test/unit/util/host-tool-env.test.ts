/**
 * The environment of the host tools the orchestrator starts (the VM backend's VMM, KVM probe and
 * ip/mkfs helpers, and nft wherever it runs): a short allowlist of the orchestrator's, never its
 * credentials nor anything preloaded into it.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { scrubbed } from '../../../src/scaler/backends/bare-metal/env.js';
import { HOST_TOOL_ENV_ALLOWLIST, hostToolEnv } from '../../../src/util/host-tool-env.js';

const SECRETS = {
  KICI_ADMIN_TOKEN: 'admin-tok',
  KICI_DATABASE_URL: 'postgres://u:p@db/k',
  KICI_AGENT_TOKEN: 'orchestrator-own-token',
  KICI_WEBHOOK_SECRET: 'whsec',
  PGPASSWORD: 'pw',
  PGUSER: 'kici',
  PGHOST: 'db',
  DATABASE_URL: 'postgres://x',
};
const PRELOAD = {
  LD_PRELOAD: '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1',
  LD_LIBRARY_PATH: '/opt/evil/lib',
  LD_AUDIT: '/opt/evil/audit.so',
  FAKETIME: '-1d',
  FAKETIME_NO_CACHE: '1',
};
const KEPT = { PATH: '/usr/sbin:/usr/bin:/bin', LANG: 'C.UTF-8', LC_ALL: 'C', TZ: 'UTC', TMPDIR: '/var/tmp' };
const OTHER = { HOME: '/root', USER: 'root', SSH_AUTH_SOCK: '/tmp/agent', NODE_OPTIONS: '--require x' };

/** What no VM host process may ever be given: the bare-metal scrub list, the loader's and libfaketime's variables. */
const forbidden = (k: string) => scrubbed(k) || /^LD_/.test(k) || /^FAKETIME/.test(k);

describe('hostToolEnv', () => {
  it('keeps the allowlisted variables and drops credentials, preloads and everything else', () => {
    expect(hostToolEnv({ ...SECRETS, ...PRELOAD, ...KEPT, ...OTHER })).toEqual(KEPT);
  });

  it('leaves out an allowlisted variable the host does not set (no "undefined" strings)', () => {
    const env = hostToolEnv({ PATH: '/bin', TZ: undefined, ...SECRETS });
    expect(env).toEqual({ PATH: '/bin' });
    expect(Object.keys(env)).toEqual(['PATH']);
  });

  it('the allowlist is exactly the documented one, and none of it is a forbidden name', () => {
    expect([...HOST_TOOL_ENV_ALLOWLIST].sort()).toEqual(['LANG', 'LC_ALL', 'PATH', 'TMPDIR', 'TZ']);
    for (const k of HOST_TOOL_ENV_ALLOWLIST) expect(forbidden(k), k).toBe(false);
  });

  it('the forbidden-name check itself recognises the variables this is about', () => {
    for (const k of [...Object.keys(SECRETS), ...Object.keys(PRELOAD)]) expect(forbidden(k), k).toBe(true);
  });

  it('property: for any host env, no output name is forbidden, and the output is a part of the input', () => {
    // Names near the ones that matter (prefixes of secrets and preloads, allowlisted names, their
    // case variants), and arbitrary strings.
    const prefix = fc.constantFrom('KICI_', 'PG', 'LD_', 'FAKETIME', 'DATABASE_URL', 'LC_', 'PATH', '');
    const name = fc.oneof(
      fc.constantFrom(
        ...Object.keys({ ...SECRETS, ...PRELOAD, ...KEPT, ...OTHER }),
        'path',
        'Path',
        'LC_CTYPE',
        'KICI_SBIN_DIRS',
      ),
      fc.tuple(prefix, fc.stringMatching(/^[A-Z0-9_]{0,12}$/)).map(([p, s]) => p + s),
      fc.string({ maxLength: 16 }),
    );
    fc.assert(
      fc.property(fc.dictionary(name, fc.option(fc.string(), { nil: undefined })), (host) => {
        const out = hostToolEnv(host);
        for (const [k, v] of Object.entries(out)) {
          expect(forbidden(k), k).toBe(false);
          expect((HOST_TOOL_ENV_ALLOWLIST as readonly string[]).includes(k), k).toBe(true);
          expect(v).toBe(host[k]);
        }
        // Every allowlisted variable the host sets is there.
        for (const k of HOST_TOOL_ENV_ALLOWLIST) if (host[k] !== undefined) expect(out[k]).toBe(host[k]);
      }),
      { numRuns: 500 },
    );
  });
});
