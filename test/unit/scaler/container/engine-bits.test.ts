/** Small engine-facing pieces: tools, loopback rewrite, the injected command, log frames. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { scalerFileSchema } from '../../../../src/config/index.js';
import { injectedCommand } from '../../../../src/scaler/backends/container/job-image.js';
import { demuxBuffer } from '../../../../src/scaler/backends/container/logs.js';
import { firstHost, urlForContainer } from '../../../../src/scaler/backends/container/network.js';
import { containerTools } from '../../../../src/scaler/backends/container/tools.js';
import { locateEngine } from '../../../../src/scaler/backends/container-runtime.js';

const entry = (extra: Record<string, unknown>) =>
  scalerFileSchema.parse({
    version: 1,
    scalers: [
      { name: 'c', type: 'container', maxAgents: 1, labelSets: [{ labels: ['x'], image: 'i' }], ...extra },
    ],
  }).scalers[0]!;

describe('container tools and engine location', () => {
  it('needs docker or podman on PATH only for auto-detection', () => {
    const off = { networkIsolation: false };
    expect(containerTools(entry(off))[0]!.find).toEqual({
      kind: 'any-command',
      commands: ['docker', 'podman'],
    });
    expect(containerTools(entry({ ...off, runtime: 'podman' }))[0]!.find).toEqual({
      kind: 'any-command',
      commands: ['podman'],
    });
    expect(containerTools(entry({ ...off, socketPath: '/s.sock' }))).toEqual([]);
    expect(containerTools(entry({ ...off, host: 'tcp://10.0.0.1:2375' }))).toEqual([]);
  });

  it('needs nft (fatal) whenever isolation is on, wherever the engine is', () => {
    for (const e of [entry({}), entry({ socketPath: '/s.sock' }), entry({ host: 'tcp://10.0.0.1:2375' })]) {
      const nft = containerTools(e).find((t) => t.name.startsWith('nft'));
      expect(nft).toMatchObject({ find: { kind: 'command', command: 'nft' }, severity: 'fatal' });
      expect(nft!.fix).toMatch(/nftables.*networkIsolation: false/);
    }
  });

  it('prefers host, then socketPath, then detection; no runtime is an error naming the fix', async () => {
    expect(await locateEngine(entry({ host: 'tcp://10.0.0.1:2375', runtime: 'podman' }))).toEqual({
      socketPath: 'tcp://10.0.0.1:2375',
      runtime: 'podman',
      local: false,
    });
    expect(await locateEngine(entry({ socketPath: '/tmp/podman.sock' }))).toMatchObject({
      runtime: 'podman',
      local: true,
    });
    await expect(locateEngine(entry({}), { canUse: async () => false })).rejects.toThrow(
      /No container runtime found/,
    );
  });
});

describe('urlForContainer', () => {
  it('turns a loopback orchestrator into the network gateway and leaves other hosts alone', () => {
    expect(urlForContainer('ws://127.0.0.1:4000/ws', '172.30.0.1')).toBe('ws://172.30.0.1:4000/ws');
    expect(urlForContainer('ws://localhost:4000/ws', '172.30.0.1')).toBe('ws://172.30.0.1:4000/ws');
    expect(urlForContainer('wss://ci.example.com/ws', '172.30.0.1')).toBe('wss://ci.example.com/ws');
    expect(urlForContainer('ws://127.0.0.1:4000/ws', undefined)).toBe('ws://127.0.0.1:4000/ws');
    expect(firstHost('172.17.0.0/16')).toBe('172.17.0.1');
    expect(firstHost('10.88.5.7/24')).toBe('10.88.5.1');
  });
});

describe('urlForContainer keeps everything but the host', () => {
  it('adds no trailing slash and keeps port, path, query and user info', () => {
    expect(urlForContainer('http://127.0.0.1:4000', '172.30.0.1')).toBe('http://172.30.0.1:4000');
    expect(urlForContainer('http://localhost', '172.30.0.1')).toBe('http://172.30.0.1');
    expect(urlForContainer('http://[::1]:4000/', '172.30.0.1')).toBe('http://172.30.0.1:4000/');
    expect(urlForContainer('https://u:p@127.0.0.1:8443/base?x=1#f', '172.30.0.1')).toBe(
      'https://u:p@172.30.0.1:8443/base?x=1#f',
    );
  });

  it('property: the rewrite changes only the host of a loopback URL', () => {
    fc.assert(
      fc.property(
        fc.constantFrom('http', 'https', 'ws', 'wss'),
        fc.constantFrom('127.0.0.1', 'localhost', '[::1]'),
        fc.option(fc.integer({ min: 1, max: 65535 }), { nil: undefined }),
        fc.constantFrom('', '/', '/ws', '/a/b?c=d', '?q'),
        (scheme, host, port, rest) => {
          const p = port === undefined ? '' : `:${port}`;
          const out = urlForContainer(`${scheme}://${host}${p}${rest}`, '10.0.0.1');
          expect(out).toBe(`${scheme}://10.0.0.1${p}${rest}`);
        },
      ),
    );
  });
});

describe('injectedCommand', () => {
  it('reads the comma-separated command and puts an init first when the image ships one', () => {
    const labels = {
      'kici.runtime.cmd': '/opt/kici/lib/ld.so,/opt/kici/bin/node,/opt/kici/app/dist/cli/agent.js',
    };
    expect(injectedCommand(labels, 'img')).toEqual([
      '/opt/kici/lib/ld.so',
      '/opt/kici/bin/node',
      '/opt/kici/app/dist/cli/agent.js',
    ]);
    expect(injectedCommand({ ...labels, 'kici.runtime.init': '/opt/kici/bin/tini' }, 'img')[0]).toBe(
      '/opt/kici/bin/tini',
    );
  });

  it('runs the fixed Node-plus-agent command when the image has no kici.runtime.cmd label', () => {
    const fixed = ['/opt/kici/bin/node', '/opt/kici/app/dist/cli/agent.js'];
    expect(injectedCommand({}, 'img')).toEqual(fixed);
    expect(injectedCommand(undefined, 'img')).toEqual(fixed);
    // An emptied label (a derived image cannot delete one) counts as absent.
    expect(injectedCommand({ 'kici.runtime.cmd': '' }, 'img')).toEqual(fixed);
    expect(injectedCommand({ 'kici.runtime.init': '/opt/kici/bin/tini' }, 'img')).toEqual([
      '/opt/kici/bin/tini',
      '--',
      ...fixed,
    ]);
    // tini as the image's own entrypoint counts when it lives in the injected runtime...
    expect(injectedCommand({}, 'img', ['/opt/kici/bin/tini', '--'])).toEqual([
      '/opt/kici/bin/tini',
      '--',
      ...fixed,
    ]);
    // ...and not when the job's container could not see it.
    expect(injectedCommand({}, 'img', ['/usr/bin/tini', '--'])).toEqual(fixed);
    expect(injectedCommand({}, 'img', ['/opt/kici/bin/node'])).toEqual(fixed);
  });

  it('names the image and the label when the label is not a command', () => {
    expect(() => injectedCommand({ 'kici.runtime.cmd': '[1,2' }, 'my/agent:1')).toThrow(
      /my\/agent:1: label kici.runtime.cmd is not a comma-separated command/,
    );
    expect(() => injectedCommand({ 'kici.runtime.cmd': '[]' }, 'img')).toThrow(/kici.runtime.cmd/);
    expect(() => injectedCommand({ 'kici.runtime.cmd': 'a,,b' }, 'img')).toThrow(/kici.runtime.cmd/);
  });
});

describe('demuxBuffer', () => {
  it('decodes 8-byte framed stdout/stderr and passes plain text through', () => {
    const frame = (stream: number, s: string) => {
      const h = Buffer.alloc(8);
      h[0] = stream;
      h.writeUInt32BE(Buffer.byteLength(s), 4);
      return Buffer.concat([h, Buffer.from(s)]);
    };
    expect(demuxBuffer(Buffer.concat([frame(1, 'out one\n'), frame(2, 'err two\n')]))).toEqual([
      'out one',
      'err two',
    ]);
    expect(demuxBuffer(Buffer.from('plain\ntext\n'))).toEqual(['plain', 'text']);
  });
});
