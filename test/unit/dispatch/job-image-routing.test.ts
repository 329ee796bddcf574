/** Agent-fit rules added with the container backend: the agent started for a job, and job-image agents. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canAgentRunJob, type ConnectedAgent } from '../../../src/dispatch/agent-registry.js';
import type { JobSpec } from '../../../src/jobs/run-spec.js';

const job = (id: string, image?: string) => {
  const spec: JobSpec = { runsOn: ['pool'], steps: [{ run: 'true' }], role: 'execution' };
  if (image) spec.container = { image };
  return { id, runsOn: ['pool'], spec };
};

const agent = (
  labels: string[],
  boundJobId?: string,
): Pick<ConnectedAgent, 'labels' | 'gate'> & Partial<Pick<ConnectedAgent, 'boundJobId' | 'kind'>> => ({
  labels: new Set(['pool', ...labels]),
  gate: [],
  // An agent bound to a job is one a scaler started: it reports its runtime facts.
  ...(boundJobId ? { boundJobId, kind: 'scaler' as const } : {}),
});

describe('canAgentRunJob: container jobs and job-image agents', () => {
  it('lets a container job reach the agent started for it, even without runtime labels', () => {
    expect(canAgentRunJob(agent(['kici:runtime:job-image'], 'j1'), job('j1', 'busybox'))).toBe(true);
    expect(canAgentRunJob(agent([], 'j1'), job('j1', 'busybox'))).toBe(true);
  });

  it('keeps a container job off an agent with no runtime that was not started for it', () => {
    expect(canAgentRunJob(agent([], 'j2'), job('j1', 'busybox'))).toBe(false);
    expect(canAgentRunJob(agent(['kici:runtime:docker']), job('j1', 'busybox'))).toBe(true);
    expect(canAgentRunJob(agent(['kici:runtime:podman']), job('j1', 'busybox'))).toBe(true);
  });

  it('never gives a job-image agent any job but its own', () => {
    fc.assert(
      fc.property(
        fc.constantFrom('j1', 'j2', 'j3'),
        fc.constantFrom('j1', 'j2', 'j3'),
        fc.boolean(),
        (bound, asked, container) => {
          const ok = canAgentRunJob(
            agent(['kici:runtime:job-image', 'kici:runtime:docker'], bound),
            job(asked, container ? 'img' : undefined),
          );
          expect(ok).toBe(bound === asked);
        },
      ),
    );
  });
});
