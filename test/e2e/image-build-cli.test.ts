/**
 * `kici-admin image build-agent|build-orchestrator` without a container engine: the operator gets
 * one line that names the engine setting (DOCKER_HOST) and the fix, exit 1, and no stack trace,
 * before any staging starts. (Building against a real engine is the system tier's: the compose
 * test builds the orchestrator image with the same code.)
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_BIN, runNode } from '../helpers/orchestrator.js';

let dir = '';
let missing = '';
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-image-cli-'));
  missing = `unix://${join(dir, 'no-engine.sock')}`;
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('kici-admin image without a reachable engine', () => {
  it.each(['build-agent', 'build-orchestrator'])(
    '%s: DOCKER_HOST at a missing socket: exit 1, one line naming DOCKER_HOST and the fix',
    async (cmd) => {
      const r = await runNode([ADMIN_BIN, 'image', cmd], { DOCKER_HOST: missing, KICI_AGENT_IMAGE_HOSTS: '' })
        .exited;
      expect(r.code).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toContain(`no container engine answers at ${missing} (DOCKER_HOST)`);
      expect(r.stderr).toMatch(/Fix: start dockerd .* set DOCKER_HOST=unix:\/\//);
      expect(r.stderr).not.toMatch(/^\s+at /m);
    },
  );

  it('--host wins over DOCKER_HOST, and --json gives the same error as JSON', async () => {
    const r = await runNode([ADMIN_BIN, 'image', 'build-agent', '--host', missing, '--json'], {
      DOCKER_HOST: 'unix:///var/run/elsewhere.sock',
    }).exited;
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('');
    const body = JSON.parse(r.stdout) as { error: string; problems: string[] };
    expect(body.error).toContain(`no container engine answers at ${missing} (--host)`);
    expect(body.error).toContain('DOCKER_HOST');
    expect(body.problems).toEqual([body.error]);
  });

  it('a remote engine URL is a usage error naming the setting (exit 2)', async () => {
    const r = await runNode([ADMIN_BIN, 'image', 'build-agent'], {
      DOCKER_HOST: 'tcp://127.0.0.1:2376',
      KICI_AGENT_IMAGE_HOSTS: '',
    }).exited;
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(
      /^Error: DOCKER_HOST: "tcp:\/\/127\.0\.0\.1:2376" is not a unix:\/\/\/path socket URL/,
    );
  });
});
