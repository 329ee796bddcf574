/**
 * Chaos cells on the event backend: a stand-in cloud (a provisioning job template that boots each
 * "instance" as a detached agent on this host, and kills it on scale-down), behind a real serve
 * process. Steps wait on a host file, so the fault lands while every job runs.
 */
import { randomBytes } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { listAgentProcesses } from '../../src/scaler/backends/bare-metal/orphans.js';
import { makeEventCloud } from '../helpers/event-instance.js';
import { jobGate } from '../helpers/jobs.js';
import { pidsWithEnv } from '../helpers/processes.js';
import type { CellOutcome, Fault } from './matrix.js';
import { endedInFile, runServeCell, type ServeCellSpec } from './serve-cell.js';

export const EVENT_FAULTS: readonly Fault[] = [
  'agent killed mid-step',
  'wall clock ±1 h',
  'kill -9 orchestrator',
  'PostgreSQL restart',
  'data-dir disk full',
  'kill -9 cluster leader',
];

/** Instances the cloud booted and has not stopped (their pid files), and what still runs. */
async function instancePids(stateDir: string): Promise<number[]> {
  const files = (await readdir(stateDir)).filter((f) => f.endsWith('.pid'));
  return Promise.all(files.map(async (f) => Number(await readFile(join(stateDir, f), 'utf8'))));
}

export async function runEventCell(fault: Fault): Promise<CellOutcome> {
  const tag = randomBytes(4).toString('hex');
  const cloud = await makeEventCloud({ mode: 'ws', maxAgents: 3 });
  const gate = await jobGate();
  const alive = async (pids: number[]) =>
    pids.filter((p) => {
      try {
        process.kill(p, 0);
        return true;
      } catch {
        return false;
      }
    });
  const spec: ServeCellSpec = {
    config: undefined,
    configPath: cloud.configPath,
    runsOn: ['cloud'],
    step: (ran) => `echo "start $KICI_JOB_ID" >> '${ran}'; ${gate.wait}; echo "end $KICI_JOB_ID" >> '${ran}'`,
    release: () => gate.open(),
    ended: endedInFile,
    async starts(_h, ids, ran) {
      const text = await readFile(ran, 'utf8');
      return ids.map((id) => text.split('\n').filter((l) => l === `start ${id}`).length);
    },
    // Instances still running, their steps, and the provisioner's own agents.
    hostLeft: async () =>
      (await alive(await instancePids(cloud.stateDir))).length +
      (await pidsWithEnv(`TEST_TAG=${tag}`)).length +
      (await listAgentProcesses('prov')).filter((p) => p.ppid === 1).length,
    async killAgent() {
      const [pid] = await alive(await instancePids(cloud.stateDir));
      process.kill(pid!, 'SIGKILL');
    },
    clockSteps: ['+1h', '-1h'],
    async cleanup() {
      await gate.open().catch(() => undefined);
      for (const pid of await alive(await instancePids(cloud.stateDir))) process.kill(-pid, 'SIGKILL');
      for (const pid of await pidsWithEnv(`TEST_TAG=${tag}`)) process.kill(pid, 'SIGKILL');
      await gate.close();
    },
  };
  return runServeCell(fault, spec, tag);
}
