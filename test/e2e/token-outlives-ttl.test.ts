import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { freshDataDir } from '../helpers/data-dir.js';
import {
  adminApi,
  freePort,
  killAgentsOf,
  killServe,
  startServe,
  type ServeProcess,
} from '../helpers/crash.js';
import { bareMetalConfig, eventually, writeConfig } from '../helpers/orchestrator.js';

/**
 * A spawned agent's token is minted for `agentTokenTtlMs` (an hour by default; 2 s here). A job
 * that runs longer, whose agent then has to dial again (the orchestrator killed and restarted), must
 * not be refused as expired: while the agent is connected its token is kept a lifetime ahead.
 */

const TTL_MS = 2_000;
let first: ServeProcess | undefined;
let second: ServeProcess | undefined;
let port: number | undefined;
const dirs: string[] = [];

interface TokenRow {
  id: string;
  agentId: string;
  kind: string;
  createdAt: string;
  expiresAt: string | null;
  state: string;
}
interface JobBody {
  state: string;
  agentId: string | null;
  reason: string | null;
}

afterEach(async () => {
  await killServe(first);
  await killServe(second);
  if (port !== undefined) await killAgentsOf(port);
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
  first = second = port = undefined;
});

describe('a single-use agent whose job outlives its token', () => {
  it('comes back after the orchestrator is killed and restarted past the token first end, and its job succeeds', async () => {
    port = await freePort();
    const dataDir = await freshDataDir();
    const work = await mkdtemp(join(tmpdir(), 'kici-ttl-'));
    const config = await writeConfig(bareMetalConfig({ maxAgents: 1 }));
    dirs.push(dataDir, work, dirname(config));
    const env = { KICI_AGENT_TOKEN_TTL_MS: String(TTL_MS) };
    first = await startServe({ config, port, dataDir, env });
    const token = (await readFile(process.env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim();
    const api1 = adminApi(first.url, token);

    const go = join(work, 'go');
    const run = await api1<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        long: {
          runsOn: ['linux', 'small'],
          steps: [{ run: `while [ ! -e '${go}' ]; do sleep 0.1; done; echo released` }],
        },
      },
    });
    expect(run.status).toBe(201);
    const jobId = run.body.jobs[0]!.id;
    const job1 = await eventually(
      async () => {
        const j = (await api1<JobBody>('GET', `/api/v1/jobs/${jobId}`)).body;
        return j.state === 'running' && j;
      },
      60_000,
      'the job running',
    );

    // The token's first lifetime is over while its agent is connected, and its end has moved on.
    const tokenOf = async (api: typeof api1) =>
      (await api<{ tokens: TokenRow[] }>('GET', '/api/v1/agents/tokens?all=true')).body.tokens.find(
        (t) => t.agentId === job1.agentId,
      );
    const kept = await eventually(
      async () => {
        const t = await tokenOf(api1);
        const firstEnd = t ? Date.parse(t.createdAt) + TTL_MS : Infinity;
        return t && Date.now() > firstEnd + 500 && t.state === 'active' && t;
      },
      30_000,
      "the token's first lifetime over, the token still active",
    );
    expect(kept.kind).toBe('ephemeral');

    // The orchestrator dies; the agent dials the next one, with the same token.
    await killServe(first);
    second = await startServe({ config, port, dataDir, env });
    const api2 = adminApi(second.url, token);
    await eventually(
      async () => {
        const agents = (await api2<{ agents: { id: string; state: string }[] }>('GET', '/api/v1/agents')).body
          .agents;
        return agents.some((a) => a.id === job1.agentId && a.state === 'busy');
      },
      60_000,
      'the agent back, still on its job',
    ).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}\n${second!.output().stdout.slice(-3000)}`);
    });

    await writeFile(go, '');
    const done = await eventually(
      async () => {
        const j = (await api2<JobBody>('GET', `/api/v1/jobs/${jobId}`)).body;
        return ['succeeded', 'failed', 'cancelled', 'timed-out'].includes(j.state) && j;
      },
      60_000,
      'the job to end',
    );
    expect(done.state, String(done.reason)).toBe('succeeded');
    expect(second.output().stdout).not.toContain('token expired');
    // Once the agent is gone its token is moved no further: it ends (or is revoked with its agent).
    await eventually(
      async () => (await tokenOf(api2))?.state !== 'active',
      30_000,
      'the token to end after its agent left',
    );
  });
});
