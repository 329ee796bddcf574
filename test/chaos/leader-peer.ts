/**
 * The cluster-leader fault, in two acts on one burst, with peers: `serve` processes on the cell's
 * PostgreSQL database with no scaler of their own. First a peer leads while the cell's instance
 * holds every agent and job; it is killed with SIGKILL, and the cell's instance must take the lease.
 * Then, with a second peer following, the cell's instance (now the leader, holding the agents) is
 * killed; the peer must take the lease, and the cell's instance, restarted on its data dir as after
 * any crash, must find its agents and jobs again. Nothing may be lost or run twice either time.
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

/** An instance's state (`alive`, `dead`, …) as a server sees it. */
export async function stateOf(url: string, token: string, id: string): Promise<string | undefined> {
  const r = await fetch(`${url}/api/v1/cluster/status`, { headers: { authorization: `Bearer ${token}` } });
  if (!r.ok) return undefined;
  return ((await r.json()) as ClusterStatus).instances.find((i) => i.id === id)?.state;
}

export interface LeaderPeer {
  id: string;
  serve: ServeProcess;
  stop(): Promise<void>;
}

/**
 * Start a peer named `id` and wait until it leads (`lead`) or is seen alive. The first one writes the
 * cluster's first admin token to the cell's token file.
 */
export async function startPeer(
  env: NodeJS.ProcessEnv,
  id: string,
  token: () => Promise<string>,
  lead = true,
): Promise<LeaderPeer> {
  const dataDir = await mkdtemp(join(tmpdir(), 'kici-chaos-leader-'));
  const config = await writeConfig({ version: 1, scalers: [] });
  const serve = await startServe({
    config,
    port: await freePort(),
    dataDir,
    env: { ...env, ...LEADER_ENV, KICI_INSTANCE_ID: id },
    // Started beside other cells' serves on a loaded host.
    readyTimeoutMs: 180_000,
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
    if (lead)
      await eventually(async () => (await leaderSeenBy(serve.url, t)) === id, 30_000, 'the peer leading');
    else
      await eventually(async () => (await stateOf(serve.url, t, id)) === 'alive', 30_000, 'the peer alive');
  } catch (err) {
    await peer.stop();
    throw err;
  }
  return peer;
}
