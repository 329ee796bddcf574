/**
 * Bare-metal agents started through the agent spawner: the scaler built by the registry starts
 * them as children of its spawner (not of the orchestrator), still counts them as its own, relays
 * their output, and tears them down. Real processes throughout.
 */
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { scalerFileSchema } from '../../../../src/config/index.js';
import { bareMetalDescriptor } from '../../../../src/scaler/backends/bare-metal/index.js';
import { groupAlive } from '../../../../src/scaler/backends/bare-metal/process-group.js';
import type { Store } from '../../../../src/store/index.js';
import { systemClock } from '../../../../src/util/clock.js';
import type { ScalerBackend } from '../../../../src/scaler/types.js';
import { spawnCtx } from '../../../helpers/event-backend.js';

let dir: string | undefined;
let backend: ScalerBackend | undefined;
afterEach(async () => {
  await backend?.shutdownAll();
  backend?.release?.();
  backend = undefined;
  if (dir) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

const ppidOf = async (pid: number) => {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
};

async function build(): Promise<{ backend: ScalerBackend; agent: string }> {
  dir = await mkdtemp(join(tmpdir(), 'kici-spawner-'));
  const agent = join(dir, 'agent.sh');
  // An id with "fail" in it stands for an agent that cannot start: it exits at once.
  await writeFile(
    agent,
    '#!/bin/sh\ncase "$KICI_AGENT_ID" in *fail*) echo "cannot start" >&2; exit 3;; esac\n' +
      'echo "agent up $KICI_AGENT_ID"\nexec sleep 600\n',
  );
  await chmod(agent, 0o755);
  const entry = scalerFileSchema.parse({
    version: 1,
    scalers: [
      {
        name: 'bm',
        type: 'bare-metal',
        maxAgents: 2,
        labelSets: [{ labels: ['linux'], binaryPath: agent, trust: 'host' }],
      },
    ],
  }).scalers[0]!;
  const b = await bareMetalDescriptor.create(entry, {
    logger: pino({ level: 'silent' }),
    clock: systemClock,
    // The bare-metal scaler keeps nothing in the store.
    store: {} as Store,
    configPath: join(dir, 'scalers.yaml'),
  });
  backend = b;
  return { backend: b, agent };
}

function spawnOne(b: ScalerBackend, agentId: string, events: string[] = []) {
  let said: (line: string) => void = () => {};
  const firstLine = new Promise<string>((r) => (said = r));
  const started = b.spawn(
    spawnCtx(agentId, {
      labelSet: ['linux'],
      fullLabels: ['linux', 'kici:scaler:bm', `kici:agent:${agentId}`],
      orchestratorUrl: 'ws://127.0.0.1:1/ws',
      auth: { kind: 'token', token: 't' },
      limits: { cpus: 0, memBytes: 0 },
      onEvent: (type, detail) => {
        events.push(`${type}: ${detail}`);
        if (type === 'agent.output') said(detail);
      },
    }),
  );
  return { started, firstLine };
}

/**
 * The first spawns may come before the spawner is ready (then the orchestrator forks them): start
 * agents until one is the spawner's child, which must happen once it has booted.
 */
async function spawnerChild(b: ScalerBackend): Promise<{ pid: number; agentId: string }> {
  for (let i = 0; ; i++) {
    const agentId = `scaler-bare-metal-spawn${String(i).padStart(3, '0')}`;
    const { started, firstLine } = spawnOne(b, agentId);
    const pid = Number((await started).backendRef);
    expect(await firstLine).toContain(`agent up ${agentId}`);
    if ((await ppidOf(pid)) !== process.pid) return { pid, agentId };
    await b.destroy(agentId, { reason: 'job-complete' });
    expect(i).toBeLessThan(50);
  }
}

describe('bare-metal agents through the spawner', () => {
  it('the agent is the spawner’s child, its output reaches the job, it is in the inventory, and destroy stops it', async () => {
    const { backend: b } = await build();
    const { pid, agentId } = await spawnerChild(b);
    const spawnerPid = await ppidOf(pid);
    expect(spawnerPid).not.toBe(1);
    expect((await readFile(`/proc/${spawnerPid}/cmdline`, 'utf8')).split('\0')[1]).toMatch(
      /spawner-main\.js$/,
    );
    expect((await b.inventory!()).map((i) => i.agentId)).toContain(agentId);
    await b.destroy(agentId, { reason: 'job-complete' });
    expect(groupAlive(pid)).toBe(false);
  });

  it('an agent that exits at once through the spawner is reported failed after its start, with its output', async () => {
    const { backend: b } = await build();
    await spawnerChild(b);
    const events: string[] = [];
    const agentId = 'scaler-bare-metal-fail001';
    const { started } = spawnOne(b, agentId, events);
    await started;
    events.push('start returned');
    await new Promise<void>((ok) => {
      const look = () => (events.some((e) => e.startsWith('scaler.failed')) ? ok() : setImmediate(look));
      look();
    });
    const failed = events.findIndex((e) => e.startsWith('scaler.failed'));
    // The manager reads a failure only for a start it has heard of: it must come after the return.
    expect(failed).toBeGreaterThan(events.indexOf('start returned'));
    expect(events[failed]).toContain('exited with code 3 before it registered');
    expect(events[failed]).toContain('cannot start');
    await b.destroy(agentId, { reason: 'spawn-failed' });
  });
});
