/**
 * The agent reports the container runtimes it can reach: the engine named by DOCKER_HOST /
 * CONTAINER_HOST, and the default sockets, each only when the socket is usable.
 */
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canUse, runtimeLabels } from '../../../src/agent/host-labels.js';
import { tempDir } from '../../helpers/temp-dirs.js';

let dir: string;
const servers: Server[] = [];

/** A real unix socket (the label only cares that it can be opened for read and write). */
async function socket(name: string): Promise<string> {
  const path = join(dir, name);
  const s = createServer();
  servers.push(s);
  await new Promise<void>((r) => s.listen(path, r));
  return path;
}

beforeAll(async () => {
  dir = await tempDir('kici-runtime-');
});
afterAll(async () => {
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
});

const none = () => false;

describe('runtime labels', () => {
  it('DOCKER_HOST naming a usable socket reports docker, or podman when the path is podman', async () => {
    const docker = await socket('docker.sock');
    const podman = await socket('podman.sock');
    expect(runtimeLabels({ DOCKER_HOST: `unix://${docker}` })).toContain('kici:runtime:docker');
    const viaPodman = runtimeLabels({ DOCKER_HOST: `unix://${podman}` });
    expect(viaPodman).toContain('kici:runtime:podman');
    expect(runtimeLabels({ CONTAINER_HOST: `unix://${podman}` }, (p) => p === podman)).toEqual([
      'kici:runtime:podman',
    ]);
  });

  it('a socket path that does not exist reports nothing (the real probe, limited to this test dir)', async () => {
    const live = await socket('live.sock');
    const probe = (p: string) => p.startsWith(dir) && canUse(p);
    expect(runtimeLabels({ DOCKER_HOST: `unix://${join(dir, 'absent.sock')}` }, probe)).toEqual([]);
    expect(runtimeLabels({ CONTAINER_HOST: `unix://${join(dir, 'absent.sock')}` }, probe)).toEqual([]);
    expect(runtimeLabels({ DOCKER_HOST: `unix://${live}` }, probe)).toEqual(['kici:runtime:docker']);
  });

  it('a remote engine is reported at the operator word; default paths are probed', () => {
    expect(runtimeLabels({ DOCKER_HOST: 'tcp://10.0.0.5:2376' }, none)).toEqual(['kici:runtime:docker']);
    expect(runtimeLabels({ CONTAINER_HOST: 'ssh://core@host/run/podman/podman.sock' }, none)).toEqual([
      'kici:runtime:podman',
    ]);
    expect(runtimeLabels({}, (p) => p === '/var/run/docker.sock')).toEqual(['kici:runtime:docker']);
    expect(runtimeLabels({}, (p) => p === '/run/podman/podman.sock')).toEqual(['kici:runtime:podman']);
    expect(
      runtimeLabels({ XDG_RUNTIME_DIR: '/run/user/7' }, (p) => p === '/run/user/7/podman/podman.sock'),
    ).toEqual(['kici:runtime:podman']);
    expect(runtimeLabels({}, none)).toEqual([]);
    expect(runtimeLabels({ DOCKER_HOST: 'npipe:////./pipe/docker' }, none)).toEqual([]);
  });
});
