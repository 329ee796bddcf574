/**
 * The engine the system-engine tier runs against (KICI_TEST_ENGINE, DOCKER_HOST), images the setup
 * loaded into it, and what the tests need to look at containers without asking the backend.
 */
import Docker from 'dockerode';
import type { AgentIsolation, AgentRuleRequest } from '../../src/net/isolation.js';
import { NftAgentIsolation } from '../../src/net/nft-isolation.js';
import { createNftRunner } from '../../src/net/nft-runner.js';
import { packageVersion } from '../../src/version.js';

export const ENGINE = (process.env.KICI_TEST_ENGINE ?? 'docker') as 'docker' | 'podman';
export const ENGINE_SOCKET = (process.env.DOCKER_HOST ?? '').replace(/^unix:\/\//, '');
export const AGENT_IMAGE = process.env.KICI_TEST_AGENT_IMAGE || `kici-agent:${packageVersion()}`;
export const BUSYBOX_IMAGE = process.env.KICI_TEST_BUSYBOX_IMAGE || 'kici-test/busybox:1';

if (!ENGINE_SOCKET) throw new Error('system-engine tests need DOCKER_HOST=unix://<engine socket>');

export const docker = new Docker({ socketPath: ENGINE_SOCKET });

/** Containers carrying this scaler's label, any state. */
export async function scalerContainers(scalerName: string): Promise<Docker.ContainerInfo[]> {
  return docker.listContainers({ all: true, filters: { label: [`kici-scaler-name=${scalerName}`] } });
}

/** Remove whatever a test's scalers left (only containers with these scaler names). */
export async function removeScalerContainers(...names: string[]): Promise<void> {
  for (const n of names)
    for (const c of await scalerContainers(n))
      await docker
        .getContainer(c.Id)
        .remove({ force: true })
        .catch(() => undefined);
}

/**
 * The real nftables isolation (the default table in this engine's namespace), recording what the
 * backend asked of it: the table refuses any agent address without rules, so a stand-in that only
 * recorded would leave agents unable to dial. Its ruled set is what the backend believes is in
 * force, so leaks of rules show up here as well as in the table.
 */
export class RecordingIsolation implements AgentIsolation {
  readonly applied: AgentRuleRequest[] = [];
  readonly removed: string[] = [];
  /** Addresses a sweep judged stale, with the live set it was given. */
  readonly reaped: { ip: string; live: string[] }[] = [];
  readonly ruled = new Set<string>();
  private readonly real = new NftAgentIsolation({ runner: createNftRunner() });
  prepare(): Promise<void> {
    return this.real.prepare();
  }
  async apply(req: AgentRuleRequest): Promise<void> {
    await this.real.apply(req);
    this.applied.push(req);
    this.ruled.add(req.ip);
  }
  async remove(ip: string): Promise<void> {
    await this.real.remove(ip);
    this.removed.push(ip);
    this.ruled.delete(ip);
  }
  async reapStale(live: ReadonlySet<string>): Promise<number> {
    let n = 0;
    for (const ip of [...this.ruled])
      if (!live.has(ip)) {
        this.reaped.push({ ip, live: [...live] });
        await this.real.remove(ip);
        this.ruled.delete(ip);
        n++;
      }
    return n;
  }
  async listRuled(): Promise<string[]> {
    return [...this.ruled];
  }
}

/** A container scaler entry on the test engine. */
export function containerScaler(
  name: string,
  overrides: Record<string, unknown> = {},
  labelSets?: unknown[],
) {
  return {
    name,
    type: 'container',
    maxAgents: 4,
    socketPath: ENGINE_SOCKET,
    labelSets: labelSets ?? [{ labels: [name], image: AGENT_IMAGE, imagePullPolicy: 'Never' }],
    ...overrides,
  };
}
