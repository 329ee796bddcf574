/**
 * Filling a job-image runtime volume: the filler container carries no scaler's label, so no orphan
 * sweep finds it; one that cannot be removed is said (it would otherwise stay for good), and one
 * the engine already removed is not.
 */
import type Docker from 'dockerode';
import { describe, expect, it } from 'vitest';
import { ensureRuntimeVolume } from '../../../../src/scaler/backends/container/job-image.js';

const engineError = (statusCode: number, message: string) =>
  Object.assign(new Error(message), { statusCode });

/** An engine with the agent image, no runtime volume yet, and a filler whose removal answers `removed`. */
function engine(removed: () => Promise<unknown>): Docker {
  const filler = {
    id: 'filler123',
    start: () => Promise.resolve(),
    wait: () => Promise.resolve({ StatusCode: 0 }),
    remove: removed,
  };
  return {
    getImage: () => ({
      inspect: () =>
        Promise.resolve({ Id: 'sha256:' + 'cd'.repeat(32), Config: { Labels: {}, Entrypoint: null } }),
    }),
    getVolume: () => ({ inspect: () => Promise.reject(engineError(404, 'no such volume')) }),
    createContainer: () => Promise.resolve(filler),
  } as unknown as Docker;
}

describe('ensureRuntimeVolume: the filler container', () => {
  it('says a filler the engine would not remove, naming it and the fix, and still uses the volume', async () => {
    const warned: string[] = [];
    const runtime = await ensureRuntimeVolume(
      engine(() => Promise.reject(engineError(500, 'driver failed to remove root filesystem'))),
      'kici-agent:1',
      (msg) => warned.push(msg),
    );
    expect(runtime.volume).toBe('kici-runtime-cdcdcdcdcdcdcdcd');
    expect(warned).toHaveLength(1);
    expect(warned[0]).toContain('filler123');
    expect(warned[0]).toContain('driver failed to remove root filesystem');
    expect(warned[0]).toContain('docker rm -f filler123');
  });

  it('says nothing when the filler is removed, or is already gone', async () => {
    const warned: string[] = [];
    await ensureRuntimeVolume(
      engine(() => Promise.resolve()),
      'kici-agent:1',
      (msg) => warned.push(msg),
    );
    await ensureRuntimeVolume(
      engine(() => Promise.reject(engineError(404, 'no such container'))),
      'kici-agent:1',
      (msg) => warned.push(msg),
    );
    expect(warned).toEqual([]);
  });
});
