/**
 * Recovery: after a restart the bare-metal backend only has the pid it recorded. That pid may have
 * been recycled by an unrelated process; our recovery proves identity through /proc/<pid>/environ
 * (KICI_AGENT_ID, our extension), so such a process is never adopted and never killed, whether it
 * leads its own process group or not.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { scalerFileSchema } from '../../../src/config/index.js';
import { createScalerBackend } from '../../../src/scaler/backends/registry.js';
import { systemClock } from '../../../src/util/clock.js';
import { running } from '../../helpers/jobs.js';
import { AGENT_BIN, ROOT } from '../../helpers/orchestrator.js';

const entry = scalerFileSchema.parse({
  version: 1,
  scalers: [
    {
      name: 'bm-recycled',
      type: 'bare-metal',
      maxAgents: 2,
      labelSets: [{ labels: ['linux'], binaryPath: AGENT_BIN, trust: 'host' }],
    },
  ],
}).scalers[0]!;

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill('SIGKILL');
});

async function unrelated(detached: boolean, env: NodeJS.ProcessEnv): Promise<number> {
  const child = spawn('sleep', ['60'], { detached, stdio: 'ignore', env });
  await new Promise<void>((ok, fail) => child.once('spawn', ok).once('error', fail));
  children.push(child);
  return child.pid!;
}

const build = () =>
  createScalerBackend(entry, {
    logger: pino({ level: 'silent' }),
    clock: systemClock,
    store: {} as never,
    configPath: `${ROOT}/scalers.yaml`,
    hostEnv: process.env,
  });

describe('bare-metal recovery never touches a recycled pid', () => {
  it.each([
    ['a group leader with no agent id', true, {}],
    ['a plain child with no agent id', false, {}],
    ['a process of another agent', true, { KICI_AGENT_ID: 'scaler-bare-metal-0th3r000' }],
  ])('%s: reapUnowned and adopt refuse it and it stays alive', async (_name, detached, extra) => {
    const pid = await unrelated(detached, { PATH: process.env.PATH, ...extra });
    const backend = await build();
    const agentId = 'scaler-bare-metal-rec0001a';
    expect(await backend.reapUnowned!(agentId, String(pid))).toBe(false);
    expect(await backend.adopt!(agentId, ['linux'], String(pid))).toBe(false);
    expect(backend.getActiveCount()).toBe(0);
    // Give any stray signal time to land.
    await new Promise((r) => setTimeout(r, 300));
    expect(await running(pid)).toBe(true);
    await backend.shutdownAll();
    expect(await running(pid)).toBe(true);
  });
});
