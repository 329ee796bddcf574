import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { agentUrlFromKiciUrl, readAgentConfig } from '../../../src/agent/config.js';
import { adminBaseUrl } from '../../../src/cli/admin/client.js';
import { defaultDataDir, resolveDataDir } from '../../../src/util/default-data-dir.js';
import { UsageError } from '../../../src/util/errors.js';
import { ADMIN_BIN, AGENT_BIN, NODE, ORCH_BIN } from '../../helpers/orchestrator.js';

describe('one KICI_URL for kici-admin and agents', () => {
  it('kici-admin: --server, then KICI_URL, then KICI_SERVER_URL, then the default', () => {
    const env = { KICI_URL: 'http://a:1', KICI_SERVER_URL: 'http://b:2' };
    expect(adminBaseUrl('http://c:3/', env)).toBe('http://c:3');
    expect(adminBaseUrl(undefined, env)).toBe('http://a:1');
    expect(adminBaseUrl(undefined, { KICI_SERVER_URL: 'http://b:2' })).toBe('http://b:2');
    expect(adminBaseUrl(undefined, {})).toBe('http://127.0.0.1:8080');
    // The agents' ws form names the same orchestrator.
    expect(adminBaseUrl(undefined, { KICI_URL: 'wss://ci.example.com/ws' })).toBe('https://ci.example.com');
  });

  it('kici-admin: a URL that is not http(s) is a usage error naming where it came from', () => {
    expect(() => adminBaseUrl('ftp://x', {})).toThrow(UsageError);
    expect(() => adminBaseUrl(undefined, { KICI_URL: 'not a url' })).toThrow(/^KICI_URL: /);
  });

  it('agents: KICI_URL in its http form dials /ws of the same origin; KICI_ORCHESTRATOR_URL wins', () => {
    expect(agentUrlFromKiciUrl('http://ci:8080')).toBe('ws://ci:8080/ws');
    expect(agentUrlFromKiciUrl('https://ci.example.com/')).toBe('wss://ci.example.com/ws');
    expect(agentUrlFromKiciUrl('https://ci.example.com/kici')).toBe('wss://ci.example.com/kici/ws');
    expect(agentUrlFromKiciUrl('ws://ci:8080/ws')).toBe('ws://ci:8080/ws');
    expect(() => agentUrlFromKiciUrl('ftp://ci')).toThrow(/KICI_URL/);
    const base = { KICI_AGENT_ID: 'a', KICI_AGENT_TOKEN: 't' };
    expect(readAgentConfig({ ...base, KICI_URL: 'http://ci:1' }).orchestratorUrl).toBe('ws://ci:1/ws');
    expect(
      readAgentConfig({ ...base, KICI_URL: 'http://ci:1', KICI_ORCHESTRATOR_URL: 'ws://other:2/ws' })
        .orchestratorUrl,
    ).toBe('ws://other:2/ws');
    expect(() => readAgentConfig(base)).toThrow(/missing environment: KICI_URL/);
  });
});

describe('the default data dir', () => {
  it('is /var/lib/kici for root and the XDG state dir otherwise, never the current directory', () => {
    expect(defaultDataDir({}, 0, '/root')).toBe('/var/lib/kici');
    expect(defaultDataDir({ XDG_STATE_HOME: '/s' }, 1000, '/home/u')).toBe('/s/kici');
    expect(defaultDataDir({}, 1000, '/home/u')).toBe('/home/u/.local/state/kici');
    // A relative XDG_STATE_HOME is invalid by the spec and ignored.
    expect(defaultDataDir({ XDG_STATE_HOME: 'rel' }, 1000, '/home/u')).toBe('/home/u/.local/state/kici');
    expect(resolveDataDir('/flag', { KICI_DATA_DIR: '/env' })).toBe('/flag');
    expect(resolveDataDir(undefined, { KICI_DATA_DIR: '/env' })).toBe('/env');
  });
});

describe('an old Node.js is refused by every bin, naming it', () => {
  // Node's own version is what the check reads; a preload makes this Node report an old one.
  const pretend = `data:text/javascript,Object.defineProperty(process,'versions',{value:{...process.versions,node:'20.11.1'}})`;
  for (const bin of [ADMIN_BIN, AGENT_BIN, ORCH_BIN])
    it(bin.split('/').pop()!, () => {
      const res = spawnSync(NODE, ['--import', pretend, bin, '--version'], { encoding: 'utf8' });
      expect(res.status).toBe(1);
      expect(res.stdout).toBe('');
      const name = bin.split('/').pop()!.replace(/\.js$/, '');
      expect(res.stderr).toMatch(
        new RegExp(`^${name}: needs Node\\.js 22 or newer; this is Node\\.js 20\\.11\\.1 \\(/.+\\)\\. `),
      );
    });
  it('the current Node.js runs them', () => {
    const res = spawnSync(NODE, [ADMIN_BIN, '--version'], { encoding: 'utf8' });
    expect(res.status).toBe(0);
  });
});
