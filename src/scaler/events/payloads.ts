/** The reserved scale events an event scaler emits, and what they carry. */

export const SCALE_UP_EVENT = 'kici.scaler.scale-up';
export const SCALE_DOWN_EVENT = 'kici.scaler.scale-down';
export type ScaleEventName = typeof SCALE_UP_EVENT | typeof SCALE_DOWN_EVENT;

export const SCALE_DOWN_REASONS = [
  'idle',
  'job-complete',
  'heartbeat-timeout',
  'spawn-timeout',
  'drain',
  'shutdown',
] as const;
export type ScaleDownReason = (typeof SCALE_DOWN_REASONS)[number];

export interface ScalerScaleUpPayload {
  scalerName: string;
  agentId: string;
  /** The full labels the provisioned agent registers with (its token is bound to them). */
  labels: string[];
  mandatoryLabels: string[];
  resources: { cpus?: number; memBytes?: number };
  orchestratorUrl: string;
  /** Single-use; the instance redeems it for its token. The token itself is never in a payload. */
  claimCode: string;
  /** The job this provision is for; absent for a warm one. */
  jobId?: string;
  requestId: string;
}

export interface ScalerScaleDownPayload {
  scalerName: string;
  agentId: string;
  reason: ScaleDownReason;
  requestId: string;
}

/** Subset of an event emitter the event backend needs; injected so tests can count emits. */
export interface ScalerEventEmitterLike {
  emitScalerScaleUp(payload: ScalerScaleUpPayload, targets: string[]): Promise<string>;
  emitScalerScaleDown(payload: ScalerScaleDownPayload, targets: string[]): Promise<string>;
}
