/**
 * The event backend's ordering rules and payloads, with a counting emitter and a recording claim
 * store injected through EventScalerBackendOptions.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { EventScalerBackend, type EventScalerBackendOptions } from '../../../src/index.js';
import { CountingEmitter, eventEntry, FakeClaims, silent, spawnCtx } from '../../helpers/event-backend.js';

function make(over: Partial<EventScalerBackendOptions> = {}) {
  const order: string[] = [];
  const emitter = new CountingEmitter(order);
  const claims = new FakeClaims(order);
  let n = 0;
  const backend = new EventScalerBackend({
    entry: eventEntry(),
    emitter,
    claimStore: claims,
    requestId: () => `req-${++n}`,
    logger: silent,
    ...over,
  });
  return { backend, emitter, claims, order };
}

describe('package entry', () => {
  it('exports the event backend and the cap lock by their declared names', async () => {
    const pkg = await import('../../../src/index.js');
    expect(typeof pkg.EventScalerBackend).toBe('function');
    expect(typeof pkg.withScalerCapLock).toBe('function');
    expect(typeof pkg.StoreClaimStore).toBe('function');
  });
});

describe('EventScalerBackend: scale-up', () => {
  it('emits the scale-up payload, with exactly its field names, to the provisioning targets', async () => {
    const { backend, emitter, claims } = make();
    const agent = await backend.spawn(
      spawnCtx('scaler-event-aaaa0001', {
        boundJobId: 'j-1',
        limits: { cpus: 2, memBytes: 1024 },
        mandatoryLabels: ['gpu'],
      }),
    );
    expect(agent).toMatchObject({ id: 'scaler-event-aaaa0001', state: 'spawning' });
    const [up] = emitter.ups();
    expect(Object.keys(up!.payload).sort()).toEqual(
      [
        'scalerName',
        'agentId',
        'labels',
        'mandatoryLabels',
        'resources',
        'orchestratorUrl',
        'claimCode',
        'jobId',
        'requestId',
      ].sort(),
    );
    expect(up!.payload).toEqual({
      scalerName: 'cloud',
      agentId: 'scaler-event-aaaa0001',
      labels: ['cloud', 'linux', 'kici:agent:event', 'kici:scaler:cloud'],
      mandatoryLabels: ['gpu'],
      resources: { cpus: 2, memBytes: 1024 },
      orchestratorUrl: 'ws://127.0.0.1:9/ws',
      claimCode: 'code-scaler-event-aaaa0001',
      jobId: 'j-1',
      requestId: 'req-1',
    });
    expect(up!.targets).toEqual(['webhook:http://127.0.0.1:1/hook']);
    expect(claims.registered[0]).toMatchObject({ agentTokenTtlSeconds: 600 });
    expect(backend.getActiveCount()).toBe(1);
    expect(backend.capabilities.lifetime).toBe('cluster');
    expect(backend.capabilities.peerAdoptable).toBe(true);
  });

  it('a warm provision has no jobId; an aborted spawn emits nothing', async () => {
    const { backend, emitter } = make();
    await backend.spawn(spawnCtx('scaler-event-aaaa0002'));
    expect('jobId' in emitter.ups()[0]!.payload).toBe(false);
    const ac = new AbortController();
    ac.abort();
    await expect(backend.spawn(spawnCtx('scaler-event-aaaa0003', { signal: ac.signal }))).rejects.toThrow(
      /aborted before start/,
    );
    expect(emitter.ups()).toHaveLength(1);
  });

  it('a failed emit untracks the provision, invalidates its claim and rethrows', async () => {
    const { backend, emitter, order } = make();
    emitter.failUp = true;
    await expect(backend.spawn(spawnCtx('scaler-event-aaaa0004'))).rejects.toThrow(/router down/);
    expect(backend.getActiveCount()).toBe(0);
    expect(order).toEqual([
      'claim:scaler-event-aaaa0004',
      'up:scaler-event-aaaa0004',
      'invalidate:scaler-event-aaaa0004',
    ]);
    await backend.destroy('scaler-event-aaaa0004', { reason: 'job-complete' });
    expect(emitter.downs()).toHaveLength(0);
  });

  it('refuses a spawn over maxAgents', async () => {
    const { backend } = make({ entry: eventEntry({ maxAgents: 1 }) });
    await backend.spawn(spawnCtx('scaler-event-aaaa0005'));
    await expect(backend.spawn(spawnCtx('scaler-event-aaaa0006'))).rejects.toThrow(/at capacity/);
  });
});

describe('EventScalerBackend: destroy', () => {
  it('drops the entry before its first await, emits once, and invalidates the claim last', async () => {
    const { backend, emitter, order } = make();
    await backend.spawn(spawnCtx('scaler-event-bbbb0001'));
    emitter.delayMs = 20;
    const first = backend.destroy('scaler-event-bbbb0001', { reason: 'job-complete' });
    // Synchronously gone: a concurrent destroy now finds nothing.
    expect(backend.getActiveCount()).toBe(0);
    const second = backend.destroy('scaler-event-bbbb0001', { reason: 'idle' });
    await Promise.all([first, second]);
    await backend.destroy('scaler-event-bbbb0001', { reason: 'shutdown' });
    expect(emitter.downs()).toHaveLength(1);
    expect(emitter.downs()[0]!.payload).toEqual({
      scalerName: 'cloud',
      agentId: 'scaler-event-bbbb0001',
      reason: 'job-complete',
      requestId: 'req-2',
    });
    expect(order.slice(-2)).toEqual(['down:scaler-event-bbbb0001', 'invalidate:scaler-event-bbbb0001']);
  });

  it('a destroy while the scale-up is on its way cancels the spawn and tears the instance down once', async () => {
    const { backend, emitter, order } = make();
    emitter.delayMs = 20;
    const spawning = backend.spawn(spawnCtx('scaler-event-bbbb0003'));
    await new Promise((r) => setTimeout(r, 5));
    await backend.destroy('scaler-event-bbbb0003', { reason: 'spawn-timeout' });
    expect(backend.getActiveCount()).toBe(0);
    await expect(spawning).rejects.toThrow(/cancelled/);
    await backend.destroy('scaler-event-bbbb0003', { reason: 'spawn-timeout' });
    expect(order.filter((o) => o.startsWith('up:') || o.startsWith('down:'))).toEqual([
      'up:scaler-event-bbbb0003',
      'down:scaler-event-bbbb0003',
    ]);
    expect(emitter.downs()[0]!.payload).toMatchObject({ reason: 'spawn-timeout' });
  });

  it('a destroy or an abort before the scale-up is sent emits nothing at all', async () => {
    const { backend, emitter } = make();
    const spawning = backend.spawn(spawnCtx('scaler-event-bbbb0004'));
    await backend.destroy('scaler-event-bbbb0004', { reason: 'shutdown' });
    await expect(spawning).rejects.toThrow(/cancelled before/);
    const ac = new AbortController();
    const aborted = backend.spawn(spawnCtx('scaler-event-bbbb0005', { signal: ac.signal }));
    ac.abort();
    await expect(aborted).rejects.toThrow(/cancelled before/);
    expect(emitter.emitted).toEqual([]);
    expect(backend.getActiveCount()).toBe(0);
  });

  it('fails open: a claim store error neither suppresses the scale-down nor throws', async () => {
    const { backend, emitter, claims } = make();
    await backend.spawn(spawnCtx('scaler-event-bbbb0002'));
    claims.failInvalidate = true;
    await expect(backend.destroy('scaler-event-bbbb0002', { reason: 'idle' })).resolves.toBeUndefined();
    expect(emitter.downs('scaler-event-bbbb0002')).toHaveLength(1);
  });

  it('maps the manager reasons onto the six scale-down reasons', async () => {
    const { backend, emitter } = make();
    const cases = [
      ['disconnected', 'job-complete'],
      ['spawn-failed', 'spawn-timeout'],
      ['orphan', 'heartbeat-timeout'],
      ['drain', 'drain'],
      ['heartbeat-timeout', 'heartbeat-timeout'],
      [undefined, 'shutdown'],
    ] as const;
    for (const [i, [given]] of cases.entries()) {
      await backend.spawn(spawnCtx(`scaler-event-cccc000${i}`));
      await backend.destroy(`scaler-event-cccc000${i}`, given ? { reason: given } : {});
    }
    expect(emitter.downs().map((d) => (d.payload as { reason: string }).reason)).toEqual(
      cases.map((c) => c[1]),
    );
  });

  it('property: any mix of repeated and concurrent destroys emits exactly one scale-down per provision', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 4 }),
        fc.array(fc.tuple(fc.nat(5), fc.boolean()), { minLength: 1, maxLength: 25 }),
        fc.integer({ min: 0, max: 3 }),
        async (spawned, calls, delayMs) => {
          const { backend, emitter } = make({ entry: eventEntry({ maxAgents: 10 }) });
          for (let i = 0; i < spawned; i++) await backend.spawn(spawnCtx(`scaler-event-d000000${i}`));
          emitter.delayMs = delayMs;
          const pending: Promise<void>[] = [];
          for (const [idx, awaitIt] of calls) {
            const p = backend.destroy(`scaler-event-d000000${idx}`, { reason: 'job-complete' });
            if (awaitIt) await p;
            else pending.push(p);
          }
          await Promise.all(pending);
          const destroyed = new Set(calls.map(([i]) => i).filter((i) => i < spawned));
          expect(emitter.downs()).toHaveLength(destroyed.size);
          for (const i of destroyed) expect(emitter.downs(`scaler-event-d000000${i}`)).toHaveLength(1);
          expect(backend.getActiveCount()).toBe(spawned - destroyed.size);
        },
      ),
      { numRuns: 60 },
    );
  });
});

describe('EventScalerBackend: shutdown, forget, adopt', () => {
  it('shutdownAll emits nothing and keeps the map, so a later destroy still emits', async () => {
    const { backend, emitter } = make();
    await backend.spawn(spawnCtx('scaler-event-eeee0001'));
    await backend.shutdownAll();
    expect(emitter.downs()).toHaveLength(0);
    expect(backend.getActiveCount()).toBe(1);
    await backend.destroy('scaler-event-eeee0001', { reason: 'job-complete' });
    expect(emitter.downs()).toHaveLength(1);
  });

  it('forget drops without emitting; adopt seeds an active entry that a destroy tears down', async () => {
    const { backend, emitter } = make();
    await backend.spawn(spawnCtx('scaler-event-eeee0002'));
    backend.forget('scaler-event-eeee0002');
    await backend.destroy('scaler-event-eeee0002', { reason: 'idle' });
    expect(emitter.downs()).toHaveLength(0);
    await backend.adopt('scaler-event-eeee0003', ['cloud', 'linux']);
    expect(await backend.adopt('scaler-event-eeee0009', ['cloud'], null)).toBe(false);
    expect(backend.getScalerContext('scaler-event-eeee0003')).toMatchObject({ state: 'active' });
    await backend.destroy('scaler-event-eeee0003', { reason: 'heartbeat-timeout' });
    expect(emitter.downs('scaler-event-eeee0003')).toHaveLength(1);
  });

  it('markActive moves provisioning to active', async () => {
    const { backend } = make();
    await backend.spawn(spawnCtx('scaler-event-eeee0004'));
    expect(backend.getScalerContext('scaler-event-eeee0004')).toMatchObject({ state: 'provisioning' });
    backend.markActive('scaler-event-eeee0004');
    expect(backend.getScalerContext('scaler-event-eeee0004')).toMatchObject({ state: 'active' });
  });
});

describe('EventScalerBackend: reload', () => {
  it('replaces the whole entry: targets, token TTL, mandatory labels and claim TTL apply from the next spawn', async () => {
    const { backend, emitter, claims } = make();
    await backend.spawn(spawnCtx('scaler-event-ffff0001'));
    const next = eventEntry({
      provisioningTargets: ['job:provision.yaml'],
      agentTokenTtlSeconds: 120,
      mandatoryLabels: ['cloud'],
      claimTtlSeconds: 60,
      maxAgents: 5,
    });
    expect(backend.reload(next.labelSets, { maxAgents: 5, entry: next })).toEqual({ valid: true });
    expect(backend.currentEntry.provisioningTargets).toEqual(['job:provision.yaml']);
    expect(backend.currentEntry.maxAgents).toBe(5);
    expect(claims.ttlSeconds).toBe(60);
    await backend.spawn(spawnCtx('scaler-event-ffff0002'));
    const ups = emitter.ups();
    expect(ups[0]!.targets).toEqual(['webhook:http://127.0.0.1:1/hook']);
    expect(ups[1]!.targets).toEqual(['job:provision.yaml']);
    expect(ups[1]!.payload.mandatoryLabels).toEqual(['cloud']);
    expect(claims.registered[1]).toMatchObject({ agentTokenTtlSeconds: 120 });
    // The provision spawned before the reload is torn down where it was provisioned.
    await backend.destroy('scaler-event-ffff0001', { reason: 'idle' });
    expect(emitter.downs()[0]!.targets).toEqual(['webhook:http://127.0.0.1:1/hook']);
  });

  it('checkReload refuses targets the emitter cannot serve, naming why', () => {
    const { backend } = make({
      checkTargets: (t) =>
        t.some((x) => x.startsWith('webhook:')) ? 'KICI_SCALER_WEBHOOK_SECRET is not set' : undefined,
    });
    expect(
      backend.checkReload(eventEntry({ provisioningTargets: ['webhook:http://127.0.0.1:1/h'] })),
    ).toEqual({
      valid: false,
      errors: ['KICI_SCALER_WEBHOOK_SECRET is not set'],
    });
    expect(backend.checkReload(eventEntry({ provisioningTargets: ['job:p.yaml'] }))).toEqual({ valid: true });
  });

  it('checkReload refuses another type and an entry without targets', () => {
    const { backend } = make();
    expect(backend.checkReload(eventEntry({ provisioningTargets: [] }))).toMatchObject({ valid: false });
    expect(backend.checkReload(eventEntry({ type: 'bare-metal' }))).toMatchObject({ valid: false });
    expect(backend.checkReload(eventEntry())).toEqual({ valid: true });
  });
});
