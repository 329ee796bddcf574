import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  AgentRegistry,
  canAgentRunJob,
  newConnectedAgent,
  type ConnectedAgent,
} from '../../../src/dispatch/agent-registry.js';
import type { QueuedJob } from '../../../src/dispatch/job-queue.js';
import type { JobSpec } from '../../../src/jobs/run-spec.js';

type JobView = Pick<QueuedJob, 'runsOn' | 'spec'>;

function jobOn(runsOn: string[], extra: { role?: JobSpec['role']; image?: string } = {}): JobView {
  const spec: JobSpec = { runsOn, steps: [{ run: 'true' }], role: extra.role ?? 'execution' };
  if (extra.image) spec.container = { image: extra.image };
  return { runsOn, spec };
}

interface AgentShape {
  kind?: 'static' | 'scaler';
  /** A single-use agent: a scaler's (only a scaler starts them). */
  ephemeral?: boolean;
  gate?: string[];
  version?: string;
  boundJobId?: string;
  jobsTaken?: number;
  busyJobId?: string;
  draining?: boolean;
}

/** A real agent record, brought into the shape asked for through its own intent methods. */
function agent(id: string, labels: string[], x: AgentShape = {}): ConnectedAgent {
  const scaled = x.kind === 'scaler' || x.ephemeral || x.gate;
  if (x.boundJobId && !scaled) throw new Error('only an agent a scaler started is bound to a job');
  const a = newConnectedAgent({
    id,
    labels,
    scaled: scaled ? { gate: x.gate ?? [], scalerName: 's', boundJobId: x.boundJobId } : null,
    jobsDone: x.jobsTaken,
    version: x.version,
    nowMs: 0,
    send: () => undefined,
    close: () => undefined,
  });
  if (x.busyJobId) a.holdResult(x.busyJobId);
  if (x.draining) a.drain();
  return a;
}

const SCALER_ROLES = ['kici:role:execution', 'kici:role:builder', 'kici:role:init-runner'];

describe('canAgentRunJob', () => {
  it.each([
    { labels: ['linux', 'docker'], runsOn: ['linux'], want: true, why: 'agent labels are a superset' },
    { labels: ['linux', 'docker'], runsOn: ['linux', 'docker'], want: true, why: 'equal sets' },
    { labels: ['linux'], runsOn: ['linux', 'docker'], want: false, why: 'the agent lacks a job label' },
    { labels: ['linux'], runsOn: [], want: true, why: 'a job with no labels fits an ungated agent' },
  ])('labels $labels, runsOn $runsOn → $want ($why)', ({ labels, runsOn, want }) => {
    expect(canAgentRunJob(agent('a', labels), jobOn(runsOn))).toBe(want);
  });

  it('needs every gate label of the agent in the job', () => {
    const gated = agent('g', ['linux', 'gpu', 'cuda'], { gate: ['gpu', 'cuda'] });
    expect(canAgentRunJob(gated, jobOn(['linux']))).toBe(false);
    expect(canAgentRunJob(gated, jobOn(['linux', 'gpu']))).toBe(false);
    expect(canAgentRunJob(gated, jobOn(['gpu', 'cuda']))).toBe(true);
    expect(canAgentRunJob(gated, jobOn([]))).toBe(false);
  });

  it('gives a container job only to an agent that reports docker or podman (where the absence is proof)', () => {
    const job = jobOn(['linux'], { image: 'node:24' });
    const ours = { version: '0.1.0' };
    expect(canAgentRunJob(agent('a', ['linux'], ours), job)).toBe(false);
    expect(canAgentRunJob(agent('a', ['linux', 'kici:runtime:container-build'], ours), job)).toBe(false);
    expect(canAgentRunJob(agent('a', ['linux', 'kici:runtime:docker'], ours), job)).toBe(true);
    expect(canAgentRunJob(agent('a', ['linux', 'kici:runtime:podman'], ours), job)).toBe(true);
    expect(canAgentRunJob(agent('a', ['linux'], ours), jobOn(['linux']))).toBe(true);
    // A scaler agent without a runtime label is proof too, whatever it reports as version.
    expect(canAgentRunJob(agent('s', ['linux'], { kind: 'scaler' }), job)).toBe(false);
    expect(canAgentRunJob(agent('v', ['linux'], { version: '1.4.0-dev.3' }), job)).toBe(false);
  });

  it('container jobs: an unversioned or older operator agent is not gated (it fails the job naming the runtime)', () => {
    const job = jobOn(['linux'], { image: 'node:24' });
    expect(canAgentRunJob(agent('old', ['linux']), job)).toBe(true);
    expect(canAgentRunJob(agent('old', ['linux'], { version: '0.0.9' }), job)).toBe(true);
    expect(canAgentRunJob(agent('odd', ['linux'], { version: 'nightly' }), job)).toBe(true);
  });

  it('container jobs: the agent started for this very job takes it; an agent inside a job image takes no other', () => {
    const job = { ...jobOn(['linux'], { image: 'node:24' }), id: 'job-1' };
    const bound = agent('b', ['linux'], { kind: 'scaler', boundJobId: 'job-1' });
    expect(canAgentRunJob(bound, job)).toBe(true);
    expect(canAgentRunJob(bound, { ...job, id: 'job-2' })).toBe(false);
    const inImage = agent('i', ['linux', 'kici:runtime:job-image', 'kici:runtime:docker'], {
      kind: 'scaler',
      boundJobId: 'job-1',
    });
    expect(canAgentRunJob(inImage, job)).toBe(true);
    expect(canAgentRunJob(inImage, { ...job, id: 'job-2' })).toBe(false);
    expect(canAgentRunJob(inImage, { ...jobOn(['linux']), id: 'job-3' })).toBe(false);
  });

  it('property: without a runtime label, a container job reaches a scaler or versioned agent only when bound to it', () => {
    fc.assert(
      fc.property(
        fc.boolean(),
        fc.option(fc.constantFrom('0.1.0', '0.2.3', '2.0.0-rc.1'), { nil: undefined }),
        fc.option(fc.constantFrom('job-1', 'job-2'), { nil: undefined }),
        (scaler, version, boundJobId) => {
          const a = agent('a', ['linux'], {
            kind: scaler ? 'scaler' : 'static',
            ...(version && { version }),
            // Only a scaler starts an agent for one job.
            ...(scaler && boundJobId && { boundJobId }),
          });
          const job = { ...jobOn(['linux'], { image: 'busybox' }), id: 'job-1' };
          const proof = scaler || version !== undefined;
          expect(canAgentRunJob(a, job)).toBe((scaler && boundJobId === 'job-1') || !proof);
        },
      ),
    );
  });

  it('keeps build and init jobs off scaler agents that do not serve the role', () => {
    const execOnly = agent('e', ['linux', 'kici:role:execution']);
    const builder = agent('b', ['linux', 'kici:role:execution', 'kici:role:builder']);
    const all = agent('x', ['linux', ...SCALER_ROLES]);
    expect(canAgentRunJob(execOnly, jobOn(['linux'], { role: 'build' }))).toBe(false);
    expect(canAgentRunJob(execOnly, jobOn(['linux'], { role: 'init' }))).toBe(false);
    expect(canAgentRunJob(execOnly, jobOn(['linux']))).toBe(true);
    expect(canAgentRunJob(builder, jobOn(['linux'], { role: 'build' }))).toBe(true);
    expect(canAgentRunJob(builder, jobOn(['linux'], { role: 'init' }))).toBe(false);
    expect(canAgentRunJob(all, jobOn(['linux'], { role: 'init' }))).toBe(true);
  });

  it("vetoes an agent carrying any of the job's excluded labels, whatever their case", () => {
    const job: JobView = {
      ...jobOn(['linux']),
      spec: { ...jobOn(['linux']).spec, excludeLabels: [' Slow ', 'kici:scaler:old'] },
    };
    expect(canAgentRunJob(agent('a', ['linux', 'slow']), job)).toBe(false);
    expect(canAgentRunJob(agent('b', ['linux', 'kici:scaler:old']), job)).toBe(false);
    expect(canAgentRunJob(agent('c', ['linux', 'fast']), job)).toBe(true);
  });

  it('does not role-gate an agent that carries no role labels at all (operator agents)', () => {
    const plain = agent('s', ['linux']);
    expect(canAgentRunJob(plain, jobOn(['linux'], { role: 'build' }))).toBe(true);
    expect(canAgentRunJob(plain, jobOn(['linux'], { role: 'init' }))).toBe(true);
  });
});

describe('AgentRegistry availability', () => {
  it('treats busy, draining and used single-use agents as unavailable', () => {
    const r = new AgentRegistry();
    expect(r.isAvailable(agent('idle', []))).toBe(true);
    expect(r.isAvailable(agent('busy', [], { busyJobId: 'j1' }))).toBe(false);
    expect(r.isAvailable(agent('drain', [], { draining: true }))).toBe(false);
    expect(r.isAvailable(agent('fresh', [], { kind: 'scaler', ephemeral: true, jobsTaken: 0 }))).toBe(true);
    expect(r.isAvailable(agent('used', [], { kind: 'scaler', ephemeral: true, jobsTaken: 1 }))).toBe(false);
    // A long-lived agent keeps taking jobs.
    expect(r.isAvailable(agent('veteran', [], { jobsTaken: 50 }))).toBe(true);
  });

  it('counts idle agents', () => {
    const r = new AgentRegistry();
    r.add(agent('a', []));
    r.add(agent('b', [], { busyJobId: 'j' }));
    r.add(agent('c', [], { ephemeral: true, jobsTaken: 1 }));
    r.add(agent('d', [], { ephemeral: true }));
    expect(r.idleCount()).toBe(2);
    expect(r.size).toBe(4);
  });
});

/** What dispatch does with the registry: the first idle agent (static first) that can run the job. */
const findIdle = (
  r: AgentRegistry,
  job: Parameters<typeof canAgentRunJob>[1],
  fits?: (a: ConnectedAgent) => boolean,
) => r.idle().find((a) => canAgentRunJob(a, job) && (!fits || fits(a)));

describe('AgentRegistry.idle', () => {
  it('prefers a static agent even when a scaler agent connected first', () => {
    const r = new AgentRegistry();
    const scaler = agent('sc', ['linux'], { kind: 'scaler', ephemeral: true });
    const staticAgent = agent('st', ['linux']);
    r.add(scaler);
    r.add(staticAgent);
    expect(findIdle(r, jobOn(['linux']))).toBe(staticAgent);
  });

  it('falls back to the first fitting scaler agent', () => {
    const r = new AgentRegistry();
    const first = agent('sc1', ['linux'], { kind: 'scaler', ephemeral: true });
    r.add(agent('st-busy', ['linux'], { busyJobId: 'x' }));
    r.add(agent('st-wrong', ['windows']));
    r.add(first);
    r.add(agent('sc2', ['linux'], { kind: 'scaler', ephemeral: true }));
    expect(findIdle(r, jobOn(['linux']))).toBe(first);
  });

  it('applies an extra fit check on top of the label rules, keeping the static preference', () => {
    const r = new AgentRegistry();
    r.add(agent('st-small', ['linux']));
    r.add(agent('sc-big', ['linux'], { kind: 'scaler', ephemeral: true }));
    r.add(agent('st-big', ['linux']));
    const big = (a: ConnectedAgent) => a.id.endsWith('-big');
    expect(findIdle(r, jobOn(['linux']), big)?.id).toBe('st-big');
    expect(findIdle(r, jobOn(['linux']), (a) => a.kind === 'scaler')?.id).toBe('sc-big');
    expect(findIdle(r, jobOn(['linux']), () => false)).toBeUndefined();
  });

  it('skips agents that cannot run the job or are not available', () => {
    const r = new AgentRegistry();
    r.add(agent('busy', ['linux'], { busyJobId: 'x' }));
    r.add(agent('drain', ['linux'], { draining: true }));
    r.add(agent('used', ['linux'], { kind: 'scaler', ephemeral: true, jobsTaken: 1 }));
    r.add(agent('gated', ['linux', 'gpu'], { gate: ['gpu'] }));
    expect(findIdle(r, jobOn(['linux']))).toBeUndefined();
    expect(findIdle(r, jobOn(['linux', 'gpu']))?.id).toBe('gated');
  });
});

describe('AgentRegistry.anyCould', () => {
  it('counts a busy long-lived agent, which will be free later', () => {
    const r = new AgentRegistry();
    r.add(agent('busy', ['linux'], { busyJobId: 'x' }));
    expect(r.anyCould(jobOn(['linux']))).toBe(true);
    expect(r.anyCould(jobOn(['windows']))).toBe(false);
  });

  it('does not count a draining agent', () => {
    const r = new AgentRegistry();
    r.add(agent('drain', ['linux'], { draining: true }));
    expect(r.anyCould(jobOn(['linux']))).toBe(false);
  });

  it('does not count a single-use agent that already took its job', () => {
    // It will exit after its one job, so waiting "for a busy agent" on it would wait for nothing.
    const r = new AgentRegistry();
    r.add(agent('used', ['linux'], { kind: 'scaler', ephemeral: true, jobsTaken: 1, busyJobId: 'x' }));
    expect(r.anyCould(jobOn(['linux']))).toBe(false);
    r.add(agent('fresh', ['linux'], { kind: 'scaler', ephemeral: true }));
    expect(r.anyCould(jobOn(['linux']))).toBe(true);
  });
});

describe('AgentRegistry membership', () => {
  it('removes by id, or only the given connection when one is passed', () => {
    const r = new AgentRegistry();
    const old = agent('a', ['linux']);
    const replacement = agent('a', ['linux']);
    r.add(old);
    r.add(replacement);
    expect(r.size).toBe(1);
    r.remove('a', old);
    expect(r.get('a')).toBe(replacement);
    r.remove('a', replacement);
    expect(r.get('a')).toBeUndefined();
    r.add(old);
    r.remove('a');
    expect(r.list()).toEqual([]);
  });
});

describe('AgentRegistry properties', () => {
  const LABELS = [
    'linux',
    'docker',
    'gpu',
    'kici:runtime:docker',
    'kici:role:execution',
    'kici:role:builder',
  ];
  const agentArb = fc.record({
    labels: fc.subarray(LABELS),
    gate: fc.subarray(['gpu', 'docker'], { maxLength: 1 }),
    kind: fc.constantFrom('static' as const, 'scaler' as const),
    ephemeral: fc.boolean(),
    jobsTaken: fc.integer({ min: 0, max: 2 }),
    busy: fc.boolean(),
    draining: fc.boolean(),
  });
  const jobArb = fc.record({
    runsOn: fc.subarray(['linux', 'docker', 'gpu']),
    role: fc.constantFrom('execution' as const, 'build' as const),
    image: fc.option(fc.constant('node:24'), { nil: undefined }),
  });

  it('findIdle returns a fitting available agent, static when one fits, none only when none fits', () => {
    fc.assert(
      fc.property(fc.array(agentArb, { maxLength: 8 }), jobArb, (specs, j) => {
        const r = new AgentRegistry();
        const agents = specs.map((s, i) =>
          agent(`a${i}`, [...new Set([...s.labels, ...s.gate])], {
            gate: s.gate,
            kind: s.kind,
            ephemeral: s.ephemeral,
            jobsTaken: s.jobsTaken,
            draining: s.draining,
            ...(s.busy ? { busyJobId: 'other' } : {}),
          }),
        );
        for (const a of agents) r.add(a);
        const job = jobOn(j.runsOn, { role: j.role, ...(j.image ? { image: j.image } : {}) });
        const fitting = agents.filter((a) => r.isAvailable(a) && canAgentRunJob(a, job));
        const hit = findIdle(r, job);
        if (fitting.length === 0) {
          expect(hit).toBeUndefined();
          return;
        }
        expect(fitting).toContain(hit);
        const firstStatic = fitting.find((a) => a.kind === 'static');
        expect(hit).toBe(firstStatic ?? fitting[0]);
        // Whatever it hands out could also "ever" run the job.
        expect(r.anyCould(job)).toBe(true);
        for (const l of job.runsOn) expect(hit!.labels.has(l)).toBe(true);
        for (const g of hit!.gate) expect(job.runsOn).toContain(g);
      }),
      { numRuns: 300 },
    );
  });
});
