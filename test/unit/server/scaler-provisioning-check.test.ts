/**
 * The diagnose rows of each scaler over the cases it tells apart: no backends, warm-pool failures
 * only, bound failures, a retiring scaler, and failures outside the five-minute window.
 */
import { describe, expect, it } from 'vitest';
import type { FailureRecord } from '../../../src/scaler/core/failure-tracker.js';
import {
  SCALER_FAILURE_WINDOW_MS,
  scalerProvisioningRows,
  type ProvisioningBackendView,
} from '../../../src/server/scaler-provisioning-check.js';

const NOW = 10_000_000;
const backend = (over: Partial<ProvisioningBackendView> = {}): ProvisioningBackendView => ({
  name: 'pool',
  type: 'container',
  activeCount: 0,
  retiring: false,
  ...over,
});
const failure = (bound: boolean, agoMs: number, detail = 'image pull failed'): FailureRecord => ({
  scalerName: 'pool',
  backendType: 'container',
  bound,
  kind: 'image-pull',
  detail,
  atMs: NOW - agoMs,
});

describe('scaler provisioning rows', () => {
  it.each([
    {
      case: 'none',
      backends: [backend()],
      records: [],
      status: 'PASS',
      message: '0 spawn failures in last 5m',
    },
    {
      case: 'warm only',
      backends: [backend()],
      records: [failure(false, 1000), failure(false, 2000)],
      status: 'WARN',
      message: '2 spawn failures in last 5m (0 bound, 2 warm-pool; last: image-pull: image pull failed)',
    },
    {
      case: 'bound',
      backends: [backend()],
      records: [failure(false, 3000), failure(true, 1000)],
      status: 'FAIL',
      message: '2 spawn failures in last 5m (1 bound, 1 warm-pool; last: image-pull: image pull failed)',
    },
    {
      case: 'retiring',
      backends: [backend({ retiring: true, activeCount: 2 })],
      records: [],
      status: 'PASS',
      message: 'retiring (2 agent(s) left) — 0 spawn failures in last 5m',
    },
    {
      case: 'outside the window',
      backends: [backend()],
      records: [failure(true, SCALER_FAILURE_WINDOW_MS), failure(true, SCALER_FAILURE_WINDOW_MS + 1)],
      status: 'PASS',
      message: '0 spawn failures in last 5m',
    },
  ])('$case', ({ backends, records, status, message }) => {
    const [row] = scalerProvisioningRows(backends, records, NOW);
    expect(row).toMatchObject({ name: 'scaler:pool', status, message });
    expect(row!.details).toMatchObject({ windowMs: 300_000, backendType: 'container' });
  });

  it('no backends: one PASS row named scaler', () => {
    expect(scalerProvisioningRows([], [failure(true, 1)], NOW)).toEqual([
      { name: 'scaler', status: 'PASS', message: 'No scaler backends configured', details: null },
    ]);
  });

  it('truncates the last error to 120 characters with an ellipsis, and details carry the counts', () => {
    const long = 'x'.repeat(300);
    const [row] = scalerProvisioningRows([backend()], [failure(true, 10, long)], NOW);
    const last = /last: (.*)\)$/.exec(row!.message)![1]!;
    expect(last).toHaveLength(120);
    expect(last.endsWith('…')).toBe(true);
    expect(row!.details).toEqual({
      windowMs: 300_000,
      backendType: 'container',
      boundCount: 1,
      unboundCount: 0,
      lastError: `image-pull: ${long}`,
      lastAtMs: NOW - 10,
      retiring: false,
      activeCount: 0,
    });
  });

  it("counts only each scaler's own failures", () => {
    const rows = scalerProvisioningRows([backend(), backend({ name: 'other' })], [failure(true, 5)], NOW);
    expect(rows.map((r) => r.status)).toEqual(['FAIL', 'PASS']);
  });
});
