/**
 * Container-job routing with real agents: a `container:` job reaches only an agent that reports a
 * runtime or was started for it; an old agent that reports no version is registered and not gated;
 * a job no agent can run says which runtime it lacks.
 */
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { nextMessage, rawRegister, type RawConn } from '../helpers/raw-ws.js';
import {
  AGENT_BIN,
  alive,
  bareMetalConfig,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { tempDir } from '../helpers/temp-dirs.js';

let t: TestOrchestrator | undefined;
const children: ReturnType<typeof runNode>[] = [];
const conns: RawConn[] = [];
const servers: Server[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) if (c.child.pid && alive(c.child.pid)) c.child.kill('SIGKILL');
  for (const c of conns.splice(0)) c.destroy();
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
  await t?.stop();
  t = undefined;
});

/** No engine anywhere in the agent's environment, whatever the test host has. */
const NO_ENGINE = { DOCKER_HOST: '', CONTAINER_HOST: '', XDG_RUNTIME_DIR: '' };

async function fakeEngineSocket(): Promise<string> {
  const path = join(await tempDir('kici-engine-'), 'docker.sock');
  const s = createServer((c) => c.destroy());
  servers.push(s);
  await new Promise<void>((r) => s.listen(path, r));
  return path;
}

async function staticAgent(id: string, labels: string[], env: Record<string, string>): Promise<string[]> {
  const tok = await t!.api<{ token: string }>('POST', '/api/v1/agents/tokens', { labels, agentId: id });
  children.push(
    runNode([AGENT_BIN], {
      KICI_ORCHESTRATOR_URL: t!.orch.wsUrl,
      KICI_AGENT_ID: id,
      KICI_AGENT_TOKEN: tok.body.token,
      KICI_LABELS: labels.join(','),
      ...env,
    }),
  );
  return eventually(
    async () => {
      const { body } = await t!.api<{ agents: { id: string; labels: string[] }[] }>('GET', '/api/v1/agents');
      return body.agents.find((a) => a.id === id)?.labels;
    },
    15_000,
    `agent ${id} registered`,
  );
}

async function job(runsOn: string[], image?: string): Promise<string> {
  const r = await t!.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
    jobs: { a: { runsOn, steps: [{ run: 'echo hi' }], ...(image && { container: { image } }) } },
  });
  return r.body.jobs[0]!.id;
}

type JobView = { state: string; agentId: string | null; reason: string | null; waiting: string | null };
const get = async (id: string) => (await t!.api<JobView>('GET', `/api/v1/jobs/${id}`)).body;

describe('container job routing', () => {
  it('goes to the agent that reports a runtime, never to one of ours without; names the runtime when none can', async () => {
    t = await startTestOrchestrator();
    const sock = await fakeEngineSocket();
    const dockLabels = await staticAgent('rt-dock', ['linux', 'dock'], {
      ...NO_ENGINE,
      DOCKER_HOST: `unix://${sock}`,
    });
    const plainLabels = await staticAgent('rt-plain', ['linux', 'plain'], NO_ENGINE);
    expect(dockLabels).toContain('kici:runtime:docker');
    expect(plainLabels.filter((l) => l.startsWith('kici:runtime:'))).toEqual([]);

    // Both match `linux`; only the agent with a runtime may take the container job.
    for (let i = 0; i < 3; i++) {
      const id = await job(['linux'], 'kici-test/busybox:1');
      const done = await eventually(
        async () => {
          const j = await get(id);
          return j.agentId ? j : undefined;
        },
        15_000,
        'the container job dispatched',
      );
      expect(done.agentId).toBe('rt-dock');
    }
    // A plain job still reaches the plain agent.
    const plainJob = await job(['plain']);
    expect(
      (
        await eventually(
          async () => ((await get(plainJob)).state === 'succeeded' ? get(plainJob) : undefined),
          15_000,
        )
      ).agentId,
    ).toBe('rt-plain');

    // Only the plain agent matches: the job waits and says which runtime it needs.
    const stuck = await job(['plain'], 'kici-test/busybox:1');
    const waiting = await eventually(
      async () => (await get(stuck)).waiting ?? undefined,
      15_000,
      'a waiting reason',
    );
    expect(waiting).toMatch(/kici:runtime:docker or kici:runtime:podman/);
    expect((await get(stuck)).agentId).toBeNull();
  });

  it('an old agent that reports no version and no runtime is registered and not gated', async () => {
    t = await startTestOrchestrator();
    const tok = await t.api<{ token: string }>('POST', '/api/v1/agents/tokens', {
      labels: ['linux', 'old'],
      agentId: 'rt-old',
    });
    const conn = await rawRegister(t.orch.url, 'rt-old', tok.body.token, ['linux', 'old']);
    conns.push(conn);
    const id = await job(['old'], 'kici-test/busybox:1');
    const assign = await nextMessage(conn, (m) => m.type === 'job.assign');
    expect(JSON.stringify(assign)).toContain(id);
  });

  it('a scaler that cannot run job images fails the container job, naming the runtime it lacks', async () => {
    t = await startTestOrchestrator({ config: bareMetalConfig() });
    const id = await job(['linux', 'small'], 'kici-test/busybox:1');
    const done = await eventually(
      async () => {
        const j = await get(id);
        return j.state !== 'queued' ? j : undefined;
      },
      30_000,
      'the job to settle',
    );
    expect(done.state).toBe('no-backend');
    expect(done.agentId).toBeNull();
    expect(done.reason).toMatch(/kici:runtime:docker or kici:runtime:podman/);
  });
});
