/**
 * The cluster-leader fault: a second `serve` on the cell's PostgreSQL database, with no scaler of
 * its own, started first so that it holds the leader lease while the cell's instance runs the
 * burst on its agents. Killing it with SIGKILL takes the leader away from under running jobs: the
 * cell's instance must take the lease over and lose nothing.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startServe, type ServeProcess } from '../helpers/crash.js';
import { eventually, writeConfig } from '../helpers/orchestrator.js';

/** Lease timing for both instances: a failover well inside a cell's step. */
export const LEADER_ENV = { KICI_CLUSTER_HEARTBEAT_MS: '1000', KICI_CLUSTER_LOCK_TIMEOUT_MS: '1000' };

interface ClusterStatus {
  instances: { id: string; state: string; leader: boolean }[];
}

/** The instance a server says leads, per the shared instances table. */
export async function leaderSeenBy(url: string, token: string): Promise<string | undefined> {
  const r = await fetch(`${url}/api/v1/cluster/status`, { headers: { authorization: `Bearer ${token}` } });
  if (!r.ok) return undefined;
  return ((await r.json()) as ClusterStatus).instances.find((i) => i.leader && i.state !== 'dead')?.id;
}

export interface LeaderPeer {
  id: string;
  serve: ServeProcess;
  stop(): Promise<void>;
}

/** Start the peer (it writes the cluster's first admin token to the cell's token file) and wait until it leads. */
export async function startLeaderPeer(env: NodeJS.ProcessEnv, tag: string, token: () => Promise<string>) {
  const id = `chaos-leader-${tag}`;
  const dataDir = await mkdtemp(join(tmpdir(), 'kici-chaos-leader-'));
  const config = await writeConfig({ version: 1, scalers: [] });
  const serve = await startServe({
    config,
    port: await freePort(),
    dataDir,
    env: { ...env, ...LEADER_ENV, KICI_INSTANCE_ID: id },
  });
  const peer: LeaderPeer = {
    id,
    serve,
    async stop() {
      if (serve.child.exitCode === null && serve.child.signalCode === null) {
        serve.child.kill('SIGKILL');
        await serve.exited;
      }
      await rm(dataDir, { recursive: true, force: true });
      await rm(join(config, '..'), { recursive: true, force: true });
    },
  };
  try {
    const t = await token();
    await eventually(async () => (await leaderSeenBy(serve.url, t)) === id, 30_000, 'the peer leading');
  } catch (err) {
    await peer.stop();
    throw err;
  }
  return peer;
}
