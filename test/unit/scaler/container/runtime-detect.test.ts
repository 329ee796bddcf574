/** Runtime detection: docker socket, then podman's, then the rootless one; hints narrow it. */
import { mkdtemp, rm, writeFile, chmod } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  detectRuntime,
  runtimeOfSocket,
  runtimeProbeOrder,
  socketPathOfHost,
  socketUsable,
} from '../../../../src/scaler/backends/container/runtime.js';

const DOCKER = '/var/run/docker.sock';
const PODMAN = '/run/podman/podman.sock';
const ROOTLESS = '/run/user/1000/podman/podman.sock';
const env = { XDG_RUNTIME_DIR: '/run/user/1000' };

describe('detectRuntime', () => {
  it('probes docker, podman, then the rootless podman socket', () => {
    expect(runtimeProbeOrder('auto', env).map((c) => c.socketPath)).toEqual([DOCKER, PODMAN, ROOTLESS]);
    expect(runtimeProbeOrder('auto', {}).map((c) => c.socketPath)).toEqual([DOCKER, PODMAN]);
    expect(runtimeProbeOrder('podman', env).map((c) => c.socketPath)).toEqual([PODMAN, ROOTLESS]);
    expect(runtimeProbeOrder('docker', env).map((c) => c.socketPath)).toEqual([DOCKER]);
  });

  it('picks the first usable socket in that order, for any set of usable sockets', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.subarray([DOCKER, PODMAN, ROOTLESS]),
        fc.constantFrom('auto', 'docker', 'podman'),
        async (usable, hint) => {
          const got = await detectRuntime(hint as 'auto', { env, canUse: async (p) => usable.includes(p) });
          const expected =
            runtimeProbeOrder(hint as 'auto', env).find((c) => usable.includes(c.socketPath)) ?? null;
          expect(got).toEqual(expected);
          if (got) expect(got.runtime).toBe(got.socketPath === DOCKER ? 'docker' : 'podman');
          if (hint !== 'auto' && got) expect(got.runtime).toBe(hint);
        },
      ),
    );
  });

  it('returns null when no socket is usable', async () => {
    expect(await detectRuntime('auto', { env, canUse: async () => false })).toBeNull();
  });

  it('needs read and write access to the socket path', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kici-rt-'));
    try {
      const f = join(dir, 'sock');
      await writeFile(f, '');
      expect(await socketUsable(f)).toBe(true);
      expect(await socketUsable(join(dir, 'missing'))).toBe(false);
      if (process.getuid?.() !== 0) {
        await chmod(f, 0o400);
        expect(await socketUsable(f)).toBe(false);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('names an explicit socket by its path, and reads unix:// hosts', () => {
    expect(runtimeOfSocket('/tmp/kici-sys/podman.sock')).toBe('podman');
    expect(runtimeOfSocket('/tmp/kici-sys/docker.sock')).toBe('docker');
    expect(socketPathOfHost('unix:///tmp/x.sock')).toBe('/tmp/x.sock');
    expect(socketPathOfHost('tcp://10.0.0.1:2376')).toBeUndefined();
  });
});
