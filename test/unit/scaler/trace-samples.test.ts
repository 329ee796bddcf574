import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scalerFileSchema } from '../../../src/config/index.js';
import { runSimulation } from '../../../src/scaler/sim/report.js';
import { formatSampleLine, type TraceSample } from '../../../src/scaler/sim/trace-samples.js';
import { formatTraceLine, parseTrace, parseTraceFile, type TraceJob } from '../../../src/scaler/sim/trace.js';
import { readTraceSamples, releasesOf } from '../../../src/server/trace-samples-query.js';
import { insertSpawnRows } from '../../../src/store/spawns-repo.js';
import { freshStore } from '../../helpers/data-dir.js';

const job: TraceJob = {
  id: 'j1',
  submitMs: Date.parse('2026-12-01T09:00:00Z'),
  labels: ['linux', 'small'],
  queueWaitMs: 800,
  runMs: 1000,
  result: 'succeeded',
  backend: 'bare-metal',
  scaler: 'small',
};

describe('trace latency lines', () => {
  it('round-trip: what the store recorded of a provision comes back from the exported lines', async () => {
    const decided = new Date('2026-12-01T09:00:00.000Z');
    await insertSpawnRows(
      fresh.store.db,
      {
        agentId: 'scaler-bare-metal-0a1b',
        scalerName: 'small',
        backendType: 'bare-metal',
        peerAdoptable: false,
        labelSet: ['small', 'linux'],
        labelSetKey: 'linux,small',
        runId: null,
        boundJobId: null,
        ownerInstanceId: 'i1',
        mandatoryLabels: [],
        spawnedAt: decided,
      },
      { cpus: 1, memBytes: 0 },
    );
    await fresh.store.spawns.markRegistered('scaler-bare-metal-0a1b', new Date(decided.getTime() + 750));
    // A second registration (a reconnect) does not move the first.
    await fresh.store.spawns.markRegistered('scaler-bare-metal-0a1b', new Date(decided.getTime() + 9000));
    await fresh.store.spawns.deleteAgent('scaler-bare-metal-0a1b', new Date(decided.getTime() + 5000));
    const samples = await readTraceSamples(fresh.store, new Date(decided.getTime() - 1000), 100);
    // No job ran on it: a spawn sample only (its row outlived the spawn record).
    expect(samples).toEqual([
      {
        kind: 'spawn',
        atMs: decided.getTime(),
        ms: 750,
        scaler: 'small',
        backend: 'bare-metal',
        labelSet: 'linux,small',
      },
    ]);
    const text = [formatTraceLine(job), ...samples!.map(formatSampleLine)].join('\n');
    expect(text.split('\n')[1]).toBe(
      '{"kind":"spawn","at":"2026-12-01T09:00:00.000Z","scaler":"small","backend":"bare-metal","labelSet":"linux,small","spawnMs":750}',
    );
    expect(parseTraceFile(text)).toEqual({ jobs: [job], samples });
    // Older readers of the job list see the same jobs.
    expect(parseTrace(text)).toEqual([job]);
    expect(await readTraceSamples(fresh.store, new Date(decided.getTime() + 1), 100)).toEqual([]);
  });

  it('a release ends at the next job-bound spawn of its scaler, each spawn paired once, else at the agent’s end', () => {
    const row = (o: {
      id: string;
      scaler?: string;
      job?: string;
      decided: number;
      finished?: number;
      gone?: number;
    }) => ({
      agent_id: o.id,
      scaler_name: o.scaler ?? 'a',
      backend_type: 'bare-metal',
      label_set: 'linux',
      bound_job_id: o.job ?? null,
      decided_at: new Date(o.decided),
      registered_at: new Date(o.decided + 100),
      gone_at: o.gone === undefined ? null : new Date(o.gone),
      created_at: null,
      started_at: null,
      finished_at: o.finished === undefined ? null : new Date(o.finished),
    });
    const rel = releasesOf([
      row({ id: 'w', decided: 0, finished: 1_000, gone: 5_000 }),
      row({ id: 'x', job: 'j1', decided: 10, finished: 1_010, gone: 5_000 }),
      row({ id: 'y', job: 'j2', decided: 1_300, finished: 9_000, gone: 9_800 }),
      row({ id: 'z', job: 'j3', decided: 1_200 }),
      // Another scaler's spawn does not end this scaler's release.
      row({ id: 'o', scaler: 'b', job: 'j4', decided: 1_050 }),
    ]);
    expect(rel.map((r) => [r.atMs, r.ms])).toEqual([
      [1_000, 200],
      [1_010, 290],
      [9_000, 800],
    ]);
  });

  it('every kind round-trips; an old trace without them still loads', () => {
    const samples: TraceSample[] = [
      { kind: 'spawn', atMs: 1_000, ms: 700, scaler: 'a', backend: 'bare-metal', labelSet: 'x' },
      { kind: 'dispatch', atMs: 1_700, ms: 40 },
      { kind: 'release', atMs: 2_700, ms: 300, scaler: 'a' },
    ];
    const text = samples.map(formatSampleLine).join('\n');
    expect(parseTraceFile(text).samples).toEqual(samples);
    expect(parseTraceFile(formatTraceLine(job))).toEqual({ jobs: [job], samples: [] });
    expect(parseTraceFile(`{"kind":"job",${formatTraceLine(job).slice(1)}`).jobs).toEqual([job]);
  });

  it('bad latency lines name the line and the field', () => {
    expect(() => parseTraceFile('{"kind":"spawn","at":"x","spawnMs":1}', 't.jsonl')).toThrow(
      /t\.jsonl:1: field "at"/,
    );
    expect(() => parseTraceFile('\n{"kind":"release","at":1,"releaseMs":-1}')).toThrow(
      /:2: field "releaseMs"/,
    );
    expect(() => parseTraceFile('{"kind":"spawn","at":1,"releaseMs":1}')).toThrow(
      /field "releaseMs" is not a field/,
    );
    expect(() => parseTraceFile('{"kind":"boot","at":1}')).toThrow(/field "kind" must be one of job, spawn/);
  });

  it('the replay follows each scaler’s traced spawns, and a flag wins over them', () => {
    const config = scalerFileSchema.parse({
      version: 1,
      scalers: ['a', 'b'].map((name) => ({
        name,
        type: 'bare-metal',
        maxAgents: 2,
        labelSets: [{ labels: ['linux', name], binaryPath: '/bin/agent' }],
      })),
    });
    const trace: TraceJob[] = ['a', 'b'].map((name, i) => ({
      submitMs: 10_000 + i,
      labels: ['linux', name],
      runMs: 100,
      queueWaitMs: null,
    }));
    const samples: TraceSample[] = [
      { kind: 'spawn', atMs: 10_000, ms: 2_000, scaler: 'a', backend: 'bare-metal' },
      { kind: 'spawn', atMs: 10_000, ms: 500, scaler: 'b', backend: 'bare-metal' },
      { kind: 'dispatch', atMs: 10_000, ms: 30 },
    ];
    const wait = (r: ReturnType<typeof runSimulation>, s: string) =>
      r.pools.find((p) => p.key === `${s}/${s},linux`)!.waitP50Ms;
    const traced = runSimulation(config, trace, { spawnMs: {}, samples });
    expect([wait(traced, 'a'), wait(traced, 'b')]).toEqual([2_030, 530]);
    const flagged = runSimulation(config, trace, { spawnMs: { a: 100 }, dispatchMs: 0, samples });
    expect([wait(flagged, 'a'), wait(flagged, 'b')]).toEqual([100, 500]);
    expect(() => runSimulation(config, trace, { spawnMs: {} })).toThrow(/no spawn time for scaler "a"/);
  });
});

let fresh: Awaited<ReturnType<typeof freshStore>>;
beforeAll(async () => {
  fresh = await freshStore();
}, 60_000);
afterAll(async () => fresh.close());
