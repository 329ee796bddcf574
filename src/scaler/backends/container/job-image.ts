/**
 * Running a job in its own image: the image has no agent of ours, so the agent image's runtime
 * (Node, its libraries, dist/ and node_modules under /opt/kici) is copied once into a named volume
 * and mounted read-only into the job's container, whose command then runs the agent.
 */
import type Docker from 'dockerode';
import { errorMessage } from '../../../util/errors.js';
import { statusOf } from './engine-errors.js';

export const RUNTIME_MOUNT = '/opt/kici';
/** Labels the agent image carries (scripts/build-agent-image.ts writes them). */
export const RUNTIME_CMD_LABEL = 'kici.runtime.cmd';
export const RUNTIME_INIT_LABEL = 'kici.runtime.init';

export interface InjectedRuntime {
  volume: string;
  /** The command that starts the agent from the mounted runtime, whatever the job image's libc. */
  cmd: string[];
}

/**
 * Where any agent image keeps Node and the agent under /opt/kici, so an operator's own image runs
 * job images without our labels. Ours adds a loader (the label) so its Node runs on any libc.
 */
export const FIXED_AGENT_COMMAND: readonly string[] = [
  `${RUNTIME_MOUNT}/bin/node`,
  `${RUNTIME_MOUNT}/app/dist/cli/agent.js`,
];

/** The image's own entrypoint names tini under /opt/kici (the only part of it a job container sees). */
function initFromEntrypoint(entrypoint: string[] | string | null | undefined): string | undefined {
  const first = Array.isArray(entrypoint) ? entrypoint[0] : undefined;
  if (!first?.startsWith(`${RUNTIME_MOUNT}/`)) return undefined;
  return /(^|\/)tini(-static)?$/.test(first) ? first : undefined;
}

/**
 * The command that starts the agent from the mounted runtime: the image's `kici.runtime.cmd` label
 * when it carries one, else the fixed Node-plus-agent command; with an init in front when the image
 * names one (its `kici.runtime.init` label, or tini as its entrypoint).
 */
export function injectedCommand(
  labels: Record<string, string> | undefined,
  image: string,
  entrypoint?: string[] | string | null,
): string[] {
  const raw = labels?.[RUNTIME_CMD_LABEL]?.trim();
  let cmd: unknown = [...FIXED_AGENT_COMMAND];
  if (raw) {
    // Comma-separated (no quotes or spaces survive every engine's import), or a JSON list.
    try {
      cmd = raw.startsWith('[') ? JSON.parse(raw) : raw.split(',');
    } catch {
      cmd = undefined;
    }
    if (!Array.isArray(cmd) || cmd.length === 0 || !cmd.every((c) => typeof c === 'string' && c !== ''))
      throw new Error(
        `agent image ${image}: label ${RUNTIME_CMD_LABEL} is not a comma-separated command (or a JSON list); fix the label or remove it to use ${FIXED_AGENT_COMMAND.join(' ')}`,
      );
  }
  const init = labels?.[RUNTIME_INIT_LABEL]?.trim() || initFromEntrypoint(entrypoint);
  return init ? [init, '--', ...(cmd as string[])] : (cmd as string[]);
}

async function volumeExists(docker: Docker, name: string): Promise<boolean> {
  try {
    await docker.getVolume(name).inspect();
    return true;
  } catch (err) {
    if (statusOf(err) === 404) return false;
    throw err;
  }
}

/** How long a found runtime volume is trusted without asking the engine again. */
const KNOWN_FOR_MS = 30_000;

/**
 * The runtime volume of `agentImage`, filled on first use. The name carries the image id, so a
 * rebuilt agent image gets a fresh volume and a running job's volume is never rewritten. Filling
 * relies on the engine copying the image's content into an empty named volume on first mount.
 * A volume found is trusted for KNOWN_FOR_MS (two round trips less per job-image spawn); a failed
 * spawn forgets it (forgetRuntimeVolume), so a volume removed meanwhile costs one attempt.
 */
export function ensureRuntimeVolume(
  docker: Docker,
  agentImage: string,
  /** Told of a filler container left behind: nothing else removes it. */
  warn: (msg: string) => void,
  nowMs = Date.now(),
): Promise<InjectedRuntime> {
  const seen = known.get(docker)?.get(agentImage);
  if (seen && nowMs - seen.at < KNOWN_FOR_MS) return Promise.resolve(seen.runtime);
  // Concurrent job-image spawns share one fill: a second filler mounting a half-filled volume would
  // see it non-empty and skip the copy.
  let perEngine = filling.get(docker);
  if (!perEngine) filling.set(docker, (perEngine = new Map()));
  const running = perEngine.get(agentImage);
  if (running) return running;
  const p = fillRuntimeVolume(docker, agentImage, warn)
    .then((runtime) => {
      let byImage = known.get(docker);
      if (!byImage) known.set(docker, (byImage = new Map()));
      byImage.set(agentImage, { runtime, at: nowMs });
      return runtime;
    })
    .finally(() => perEngine.delete(agentImage));
  perEngine.set(agentImage, p);
  return p;
}

/** The next job-image spawn asks the engine again (its volume may be what failed). */
export function forgetRuntimeVolume(docker: Docker, agentImage: string): void {
  known.get(docker)?.delete(agentImage);
}

const known = new WeakMap<Docker, Map<string, { runtime: InjectedRuntime; at: number }>>();
const filling = new WeakMap<Docker, Map<string, Promise<InjectedRuntime>>>();

async function fillRuntimeVolume(
  docker: Docker,
  agentImage: string,
  warn: (msg: string) => void,
): Promise<InjectedRuntime> {
  const info = await docker.getImage(agentImage).inspect();
  const cmd = injectedCommand(info.Config?.Labels ?? undefined, agentImage, info.Config?.Entrypoint);
  const volume = `kici-runtime-${info.Id.replace(/^sha256:/, '').slice(0, 16)}`;
  if (await volumeExists(docker, volume)) return { volume, cmd };
  const filler = await docker.createContainer({
    Image: agentImage,
    Entrypoint: [cmd[0]!],
    Cmd: ['--version'],
    Labels: { 'kici-managed': 'true', 'kici-runtime-filler': volume },
    HostConfig: { Binds: [`${volume}:${RUNTIME_MOUNT}`], NetworkMode: 'none', AutoRemove: false },
  });
  try {
    // The engine copies the image's /opt/kici into the empty volume when it mounts it, before the
    // command runs; an operator's image whose first word cannot run in the agent image itself (a
    // script for the job image's shell) still fills it, and a truly missing command fails the job
    // container's start with the engine's own message.
    await filler.start().then(
      () => filler.wait(),
      () => undefined,
    );
  } finally {
    // The filler only copied files, so the volume is usable either way. But it carries no scaler's
    // label, so no orphan sweep ever finds it: one left behind (and the volume it pins) is said.
    // Already gone (404) leaves nothing behind.
    await filler.remove({ force: true }).catch((err: unknown) => {
      if (statusOf(err) !== 404)
        warn(
          `could not remove the runtime filler container ${filler.id} of volume ${volume} (${errorMessage(err)}); nothing else removes it: remove it with \`docker rm -f ${filler.id}\` (or podman rm -f)`,
        );
    });
  }
  return { volume, cmd };
}
