/**
 * A bare-metal label set in process mode (binaryPath) runs steps on the host and cannot honour a
 * job's `container:` image. Routing must skip it for such jobs, and say why.
 */
import { describe, expect, it } from 'vitest';
import { scalerFileSchema } from '../../../src/config/index.js';
import { CapBook } from '../../../src/scaler/core/caps.js';
import { planReconcile } from '../../../src/scaler/core/plan.js';
import {
  buildRoutingTable,
  findLabelSet,
  noMatchReason,
  type HostFacts,
} from '../../../src/scaler/core/routing.js';
import type { ScaleJob } from '../../../src/scaler/types.js';
import { useManagerHarnesses } from '../../helpers/manager-harness.js';
import { bareMetal } from '../../helpers/scaler-config.js';

const LINUX_X64: HostFacts = { os: 'linux', arch: 'x64' };
const tableOf = (...scalers: Record<string, unknown>[]) =>
  buildRoutingTable(scalerFileSchema.parse({ version: 1, scalers }), { host: LINUX_X64 });
const eventScaler = (name: string, labels: string[]) => ({
  name,
  type: 'event',
  maxAgents: 4,
  provisioningTargets: ['job:provision.yaml'],
  labelSets: [{ labels }],
});
const IMAGE = 'alpine:3';
const REASON =
  'job asks for container image "alpine:3"; label set [linux,small] of scaler "bm" runs agents as host ' +
  'processes (binaryPath) and cannot run job images; add a label set with a container runtime';

describe('routing of container jobs', () => {
  it('skips process-mode bare-metal sets for a job with an image, and names what is missing', () => {
    const table = tableOf(bareMetal('bm', [['linux', 'small']]));
    expect(findLabelSet({ labels: ['linux', 'small'] }, table)?.scalerName).toBe('bm');
    const query = { labels: ['linux', 'small'], image: IMAGE };
    expect(findLabelSet(query, table)).toBeUndefined();
    expect(noMatchReason(query, table)).toBe(REASON);
    // Labels that match nothing keep the plain reason.
    expect(noMatchReason({ labels: ['gpu'], image: IMAGE }, table)).toBe('no scaler label set matches [gpu]');
  });

  it('routes the job to another scaler that can run images instead', () => {
    const table = tableOf(bareMetal('bm', [['linux', 'small']]), eventScaler('ev', ['linux', 'small']));
    expect(findLabelSet({ labels: ['linux', 'small'] }, table)?.scalerName).toBe('bm');
    expect(findLabelSet({ labels: ['linux', 'small'], image: IMAGE }, table)?.scalerName).toBe('ev');
  });

  it('a bare-metal set in job-image mode (image, no binaryPath) still qualifies', () => {
    const table = tableOf(
      bareMetal('bm', [{ labels: ['linux'], binaryPath: undefined, image: 'kici/agent:1' }]),
    );
    expect(findLabelSet({ labels: ['linux'], image: IMAGE }, table)?.scalerName).toBe('bm');
  });

  it('the planner spawns nothing for the job and reports no-backend with the reason', () => {
    const table = tableOf(bareMetal('bm', [['linux', 'small']]));
    const group = {
      key: 'g',
      labels: ['linux', 'small'],
      image: IMAGE,
      size: 3,
      jobIds: () => ['a', 'b', 'c'],
    };
    const [d] = planReconcile({
      groups: [group],
      idleAgents: [],
      canRun: () => false,
      table,
      caps: new CapBook({ globalMaxAgents: 10, scalers: new Map([['bm', { maxAgents: 10 }]]) }),
      live: { global: 0, perScaler: new Map() },
      backoff: () => ({ blocked: false }),
      isProvisioning: () => false,
      requestsFor: () => ({ cpus: 0, memBytes: 0 }),
      scaling: true,
    });
    expect(d!.spawn).toEqual([]);
    expect(d!.noBackend).toBe(REASON);
  });
});

const hs = useManagerHarnesses();

describe('the manager with a container job', () => {
  it('requestScale answers no-backend with the reason and spawns nothing', async () => {
    const h = await hs.make({
      dispatcher: false,
      config: { version: 1, scalers: [bareMetal('bm', [['linux', 'small']])] },
    });
    const job: ScaleJob = { id: 'j1', runId: 'r1', runsOn: ['linux', 'small'], container: { image: IMAGE } };
    const r = await h.manager.requestScale(job);
    expect(r.action).toBe('no-backend');
    expect(r.action === 'no-backend' && r.reason).toContain(REASON);
    expect(h.backend('bm').spawns).toEqual([]);
  });
});
