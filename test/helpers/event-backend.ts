import { pino } from 'pino';
import type { ScalerEntry } from '../../src/config/index.js';
import type { ClaimedCredentials, ClaimSpec } from '../../src/scaler/claim-store.js';
import type { EventClaimStore } from '../../src/scaler/backends/event/backend.js';
import type {
  ScalerEventEmitterLike,
  ScalerScaleDownPayload,
  ScalerScaleUpPayload,
} from '../../src/scaler/events/payloads.js';
import type { SpawnContext } from '../../src/scaler/types.js';
import { spawnContext } from './spawn-context.js';

export type Emitted =
  | { kind: 'up'; payload: ScalerScaleUpPayload; targets: string[] }
  | { kind: 'down'; payload: ScalerScaleDownPayload; targets: string[] };

/** Counts every emit; each may be held (to race destroys) or made to fail. */
export class CountingEmitter implements ScalerEventEmitterLike {
  readonly emitted: Emitted[] = [];
  /** Every step the backend took, in order (shared with the claim fake). */
  constructor(readonly order: string[] = []) {}
  failUp = false;
  delayMs = 0;
  private n = 0;

  async emitScalerScaleUp(payload: ScalerScaleUpPayload, targets: string[]): Promise<string> {
    this.order.push(`up:${payload.agentId}`);
    if (this.delayMs) await new Promise((r) => setTimeout(r, this.delayMs));
    if (this.failUp) throw new Error('router down');
    this.emitted.push({ kind: 'up', payload, targets });
    return `ev-${++this.n}`;
  }

  async emitScalerScaleDown(payload: ScalerScaleDownPayload, targets: string[]): Promise<string> {
    this.order.push(`down:${payload.agentId}`);
    if (this.delayMs) await new Promise((r) => setTimeout(r, this.delayMs));
    this.emitted.push({ kind: 'down', payload, targets });
    return `ev-${++this.n}`;
  }

  downs(agentId?: string) {
    return this.emitted.filter((e) => e.kind === 'down' && (!agentId || e.payload.agentId === agentId));
  }
  ups() {
    return this.emitted.filter((e): e is Extract<Emitted, { kind: 'up' }> => e.kind === 'up');
  }
}

/** An in-memory claim store that records what the backend asked of it. */
export class FakeClaims implements EventClaimStore {
  readonly registered: ClaimSpec[] = [];
  ttlSeconds = 300;
  failInvalidate = false;
  constructor(readonly order: string[] = []) {}

  register(spec: ClaimSpec): Promise<string> {
    this.registered.push(spec);
    this.order.push(`claim:${spec.agentId}`);
    return Promise.resolve(`code-${spec.agentId}`);
  }
  claim(): Promise<ClaimedCredentials | { error: string }> {
    return Promise.resolve({ error: 'invalid claim code' });
  }
  invalidate(agentId: string): Promise<unknown> {
    this.order.push(`invalidate:${agentId}`);
    return this.failInvalidate ? Promise.reject(new Error('db down')) : Promise.resolve(1);
  }
  setDefaultTtlSeconds(s: number): void {
    this.ttlSeconds = s;
  }
}

export function eventEntry(over: Partial<ScalerEntry> = {}): ScalerEntry {
  return {
    name: 'cloud',
    type: 'event',
    maxAgents: 3,
    maxConcurrentSpawns: 8,
    labelSets: [{ labels: ['cloud', 'linux'] }],
    networkIsolation: true,
    mandatoryLabels: [],
    runtime: 'auto',
    enforceCgroups: false,
    chrootBaseDir: '/srv/jailer',
    vcpuCount: 2,
    memSizeMib: 512,
    requireSudo: false,
    provisioningTargets: ['webhook:http://127.0.0.1:1/hook'],
    claimTtlSeconds: 300,
    agentTokenTtlSeconds: 600,
    ...over,
  } as ScalerEntry;
}

export function spawnCtx(agentId: string, over: Partial<SpawnContext> = {}): SpawnContext {
  return spawnContext(agentId, ['cloud', 'linux'], {
    fullLabels: ['cloud', 'linux', 'kici:agent:event', 'kici:scaler:cloud'],
    orchestratorUrl: 'ws://127.0.0.1:9/ws',
    auth: { kind: 'claim', code: '' },
    ...over,
  });
}

export const silent = pino({ level: 'silent' });
