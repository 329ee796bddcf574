/**
 * What the public call shapes do, beyond type-checking: the positional spawn derives the same
 * context the manager would build, destroy works without a context, claim rejects, a LogCapture
 * follows its agent's lines, and the container options fill their defaults.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  buildAgentContainerHostConfig,
  buildAgentHostConfig,
  ClaimRefused,
  EventScalerBackend,
  runDiskGuard,
  type ScalerEntry,
  type ScalerEvent,
  type ScalerScaleDownPayload,
} from '../../../src/index.js';
import { logCaptureOf } from '../../../src/scaler/backends/log-capture.js';
import { LineTail } from '../../../src/scaler/backends/container/logs.js';
import { contextFromPositional } from '../../../src/scaler/backends/positional-spawn.js';
import { limitsOf, mergeHosts, resolveOptions } from '../../../src/scaler/backends/container/options.js';
import type { ClaimedCredentials } from '../../../src/scaler/claim-store.js';
import { CountingEmitter, eventEntry, FakeClaims } from '../../helpers/event-backend.js';

const containerEntry = (over: Partial<ScalerEntry> = {}): ScalerEntry =>
  eventEntry({
    name: 'boxes',
    type: 'container',
    labelSets: [{ labels: ['linux'] }],
    ...over,
  } as Partial<ScalerEntry>);

describe('positional spawn context', () => {
  it('derives full labels, mints the token for exactly them, and reports events as objects', async () => {
    const minted: Array<{ agentId: string; labels: string[] }> = [];
    const events: ScalerEvent[] = [];
    const ctx = await contextFromPositional(
      containerEntry({ mandatoryLabels: ['gpu'] }),
      [
        ['Linux ', 'x64'],
        'a-1',
        'http://127.0.0.1:4000',
        (e) => events.push(e),
        { cpus: 1, memBytes: 0 },
        { boundJobId: 'j-1' },
      ],
      { mint: async (agentId, labels) => (minted.push({ agentId, labels }), 'tok-1'), now: () => 42 },
    );
    expect(ctx.labelSet).toEqual(['linux', 'x64']);
    expect(ctx.fullLabels).toEqual(
      expect.arrayContaining(['linux', 'x64', 'kici:agent:container', 'kici:scaler:boxes']),
    );
    expect(minted).toEqual([{ agentId: 'a-1', labels: ctx.fullLabels }]);
    expect(ctx.auth).toEqual({ kind: 'token', token: 'tok-1' });
    expect(ctx.mandatoryLabels).toEqual(['gpu']);
    expect(ctx.boundJobId).toBe('j-1');
    expect(ctx.limits).toEqual({ cpus: 1, memBytes: 0 });
    expect(ctx.signal.aborted).toBe(false);
    ctx.onEvent('scaler.provisioning', 'pulling');
    expect(events).toEqual([
      { agentId: 'a-1', eventType: 'scaler.provisioning', detail: 'pulling', timestampMs: 42 },
    ]);
  });

  it('without a token store the agent gets no token, and the given signal is the one used', async () => {
    const ac = new AbortController();
    const ctx = await contextFromPositional(containerEntry(), [
      ['linux'],
      'a-2',
      'http://x',
      undefined,
      undefined,
      undefined,
      ac.signal,
    ]);
    expect(ctx.auth).toEqual({ kind: 'token', token: '' });
    ac.abort();
    expect(ctx.signal.aborted).toBe(true);
  });
});

describe('EventScalerBackend public shapes', () => {
  function make(claimAnswer?: ClaimedCredentials) {
    const emitter = new CountingEmitter([]);
    const claims = new FakeClaims();
    if (claimAnswer) claims.claim = () => Promise.resolve(claimAnswer);
    // No logger: the options make it optional.
    const backend = new EventScalerBackend({
      entry: eventEntry(),
      emitter,
      claimStore: claims,
      requestId: () => 'r-1',
    });
    return { backend, emitter, claims };
  }

  it('spawns by the positional form, emitting a scale-up with the derived labels', async () => {
    const { backend, emitter, claims } = make();
    const agent = await backend.spawn(['linux', 'cloud'], 'scaler-event-p1', 'https://ci.example.com');
    expect(agent).toMatchObject({ id: 'scaler-event-p1', state: 'spawning', labelSet: ['linux', 'cloud'] });
    expect(claims.registered[0]!.labels).toEqual(
      expect.arrayContaining(['linux', 'cloud', 'kici:agent:event', 'kici:scaler:cloud']),
    );
    expect(emitter.ups()[0]!.payload.orchestratorUrl).toBe('https://ci.example.com');
  });

  it('destroys without a context (a shutdown teardown)', async () => {
    const { backend, emitter } = make();
    await backend.spawn(['cloud', 'linux'], 'scaler-event-p2', 'https://ci');
    await backend.destroy('scaler-event-p2');
    expect(emitter.downs().map((d) => (d.payload as ScalerScaleDownPayload).reason)).toEqual(['shutdown']);
    expect(backend.getActiveCount()).toBe(0);
  });

  it('claim resolves the credentials, and rejects with ClaimRefused naming why', async () => {
    const creds = { agentToken: 't', agentId: 'a', orchestratorUrl: 'u', labels: ['l'] };
    await expect(make(creds).backend.claim('c')).resolves.toEqual(creds);
    const refused = make().backend.claim('bad');
    await expect(refused).rejects.toBeInstanceOf(ClaimRefused);
    await expect(refused).rejects.toThrow('invalid claim code');
  });
});

describe('LogCapture', () => {
  it('tail is the last lines joined, never more than 50', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.string({ maxLength: 5 }).filter((s) => !s.includes('\n')),
          { maxLength: 120 },
        ),
        fc.nat(80),
        (lines, n) => {
          const src = new LineTail();
          for (const l of lines) src.push(l);
          const cap = logCaptureOf(src);
          const keep = Math.min(n, 50, lines.length);
          expect(cap.tail(n)).toBe(keep === 0 ? '' : lines.slice(-keep).join('\n'));
        },
      ),
    );
  });

  it('lines() yields the kept lines, then live ones, and ends when the agent is gone', async () => {
    const src = new LineTail();
    src.push('one');
    const seen: string[] = [];
    const done = (async () => {
      for await (const l of logCaptureOf(src).lines()) {
        seen.push(l);
        if (l === 'one') src.push('two');
        if (l === 'two') src.end();
      }
    })();
    await done;
    expect(seen).toEqual(['one', 'two']);
  });

  it('close() ends every iteration of the capture', async () => {
    const src = new LineTail();
    const cap = logCaptureOf(src);
    const it = cap.lines()[Symbol.asyncIterator]();
    const next = it.next();
    cap.close();
    await expect(next).resolves.toEqual({ done: true, value: undefined });
  });

  it('a source without a feed yields its kept lines and ends', async () => {
    const seen: string[] = [];
    for await (const l of logCaptureOf({ kept: () => ['a', 'b'] }).lines()) seen.push(l);
    expect(seen).toEqual(['a', 'b']);
  });
});

describe('container options defaults', () => {
  it('a remote host builds its own client, with no local socket and a silent logger', async () => {
    const o = await resolveOptions({
      entry: containerEntry({ host: 'tcp://10.9.9.9:2375' }),
      runtime: 'auto',
    });
    expect(o.runtime).toBe('docker');
    expect(o.socketPath).toBeUndefined();
    expect(typeof o.docker.ping).toBe('function');
    expect(typeof o.logger.info).toBe('function');
  });

  it('networkIsolation in the options overrides the entry; a given client keeps its socket runtime', async () => {
    const docker = {} as never;
    const o = await resolveOptions({
      entry: containerEntry(),
      docker,
      socketPath: '/run/podman/podman.sock',
      networkIsolation: false,
    });
    expect(o.isolated).toBe(false);
    expect(o.runtime).toBe('podman');
    expect((await resolveOptions({ entry: containerEntry(), docker })).isolated).toBe(true);
  });

  it('extra hosts add to the entry; default resources become limits', () => {
    expect(mergeHosts(['a:1.1.1.1'], ['b:host-gateway', 'a:1.1.1.1'])).toEqual([
      'a:1.1.1.1',
      'b:host-gateway',
    ]);
    expect(mergeHosts(undefined, undefined)).toBeUndefined();
    expect(limitsOf({ limits: { cpus: 2, memory: '1g' } })).toEqual({ cpus: 2, memBytes: 1024 ** 3 });
    expect(limitsOf(undefined)).toBeUndefined();
  });
});

describe('seed names of the HostConfig builder and the disk guard', () => {
  it('buildAgentContainerHostConfig takes binds; buildAgentHostConfig is the same builder', () => {
    expect(buildAgentHostConfig).toBe(buildAgentContainerHostConfig);
    expect(buildAgentContainerHostConfig({ binds: ['/a:/a'], volumes: ['/b:/b'] }).Binds).toEqual([
      '/a:/a',
      '/b:/b',
    ]);
  });

  it('runDiskGuard reads scalerConfig and statfsFn', async () => {
    const scalerConfig = {
      scalers: [containerEntry({ type: 'firecracker', chrootBaseDir: '/vm' })],
    } as never;
    const asked: string[] = [];
    const r = await runDiskGuard({
      scalerConfig,
      thresholdBytes: 100,
      statfsFn: async (p) => (asked.push(p), { bavail: 10, bsize: 20 }),
      reapFn: async () => ({ reaped: 0 }),
    });
    expect(asked).toEqual(['/vm']);
    expect(r).toEqual({ reaped: false, recovered: true, freeBytesAfter: 200 });
  });
});
