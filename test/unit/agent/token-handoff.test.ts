/** The agent takes its token from a descriptor or a file, and leaves none of it in its environment. */
import { existsSync, fstatSync, openSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentConfigError } from '../../../src/agent/config.js';
import { takeHandedToken } from '../../../src/agent/token-handoff.js';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function tokenFile(content: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-handoff-'));
  dirs.push(dir);
  const path = join(dir, 'token');
  writeFileSync(path, content, { mode: 0o600 });
  return path;
}

describe('takeHandedToken', () => {
  it('reads a file, removes it, and scrubs every secret variable', async () => {
    const path = await tokenFile('kici_filed\n');
    const env: NodeJS.ProcessEnv = {
      KICI_AGENT_TOKEN_FILE: path,
      KICI_ADMIN_TOKEN: 'admin',
      KICI_AGENT_ID: 'a',
    };
    expect(takeHandedToken(env)).toBe('kici_filed');
    expect(existsSync(path)).toBe(false);
    expect(env).toEqual({ KICI_AGENT_ID: 'a' });
  });

  it('reads a descriptor to its end and closes it', async () => {
    const fd = openSync(await tokenFile('kici_fd\n'), 'r');
    const env: NodeJS.ProcessEnv = { KICI_AGENT_TOKEN_FD: String(fd) };
    expect(takeHandedToken(env)).toBe('kici_fd');
    expect(() => fstatSync(fd)).toThrow(/EBADF/);
    expect(env).toEqual({});
  });

  it('falls back to KICI_AGENT_TOKEN, and removes it from the environment', () => {
    const env: NodeJS.ProcessEnv = { KICI_AGENT_TOKEN: 'kici_env', KICI_SCALER_CLAIM_CODE: 'c' };
    expect(takeHandedToken(env)).toBe('kici_env');
    expect(env).toEqual({ KICI_SCALER_CLAIM_CODE: 'c' });
  });

  it('names what is wrong with a bad descriptor or a missing file', () => {
    expect(() => takeHandedToken({ KICI_AGENT_TOKEN_FD: 'x' })).toThrow(AgentConfigError);
    expect(() => takeHandedToken({ KICI_AGENT_TOKEN_FILE: '/nonexistent/kici-token' })).toThrow(
      /cannot read the token file \/nonexistent\/kici-token/,
    );
  });
});
