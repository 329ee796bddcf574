/**
 * The two images this package can build without a registry: the agent image (the runtime a
 * container job runs in, or mounts read-only from /opt/kici) and the orchestrator image (serve, as
 * a non-root user, with its data dir as a volume). Each is staged once from this installed package
 * and the Node running this code, then imported into every engine named.
 */
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { UserError } from '../util/errors.js';
import { packageVersion } from '../version.js';
import {
  checkEngines,
  importRootfs,
  packRootfs,
  type EngineTargets,
  type OwnedPath,
} from './engine-import.js';
import {
  moduleClosure,
  OPT,
  stageFiles,
  stageNode,
  stagePackages,
  stageShell,
  writeAppPackageJson,
} from './rootfs.js';

/** The package root: dist/image (or src/image) → two levels up. */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface ImageBuildOptions {
  /** Image reference; default kici-agent:<version> or kici-orchestrator:<version>. */
  tag?: string | undefined;
  engines: EngineTargets;
  /** The Node binary to ship; default the one running this. */
  node?: string | undefined;
  /** Progress lines (stderr in the CLI). */
  say: (m: string) => void;
}

/** The uid/gid the orchestrator image runs as; its data dir belongs to it. */
export const ORCHESTRATOR_UID = 10001;
export const ORCHESTRATOR_DATA_DIR = 'var/lib/kici';

export function buildAgentImage(o: ImageBuildOptions): Promise<string> {
  const version = packageVersion();
  return build(o, o.tag || `kici-agent:${version}`, [], (stage, loader) => {
    const app = join(stage, 'opt/kici/app');
    const { files, packages } = moduleClosure(join(distDir(), 'cli/agent.js'));
    stageFiles(ROOT, app, files);
    writeAppPackageJson(app, 'kici-agent-runtime', version);
    stagePackages(ROOT, app, packages);
    writeFileSync(join(stage, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\n');
    writeFileSync(join(stage, 'etc/group'), 'root:x:0:\n');
    const cmd = [loader, '--library-path', `${OPT}/lib`, `${OPT}/bin/node`, `${OPT}/app/dist/cli/agent.js`];
    return [
      `CMD ${JSON.stringify(cmd)}`,
      'ENV PATH=/usr/local/bin:/usr/bin:/bin',
      'WORKDIR /work',
      // Comma-separated: quotes in a LABEL change are kept literally by Podman's import.
      `LABEL kici.runtime.cmd=${cmd.join(',')}`,
      `LABEL org.opencontainers.image.version=${version}`,
    ];
  });
}

export function buildOrchestratorImage(o: ImageBuildOptions): Promise<string> {
  const version = packageVersion();
  const uid = ORCHESTRATOR_UID;
  const owned: OwnedPath[] = [{ path: ORCHESTRATOR_DATA_DIR, uid, gid: uid }];
  return build(o, o.tag || `kici-orchestrator:${version}`, owned, (stage, loader) => {
    const app = join(stage, 'opt/kici/app');
    // The whole of dist/ (serve loads parts of it on demand), without maps and declarations.
    stageFiles(ROOT, app, jsFiles(distDir()));
    stageFiles(ROOT, app, [join(ROOT, 'package.json')]);
    if (existsSync(join(ROOT, 'ui'))) stageFiles(ROOT, app, jsFiles(join(ROOT, 'ui'), /./));
    stagePackages(ROOT, app, Object.keys(packageDependencies()));
    mkdirSync(join(stage, ORCHESTRATOR_DATA_DIR), { recursive: true });
    writeFileSync(
      join(stage, 'etc/passwd'),
      `root:x:0:0:root:/root:/bin/sh\nkici:x:${uid}:${uid}:kici:/${ORCHESTRATOR_DATA_DIR}:/bin/sh\n`,
    );
    writeFileSync(join(stage, 'etc/group'), `root:x:0:\nkici:x:${uid}:\n`);
    const entry = [
      loader,
      '--library-path',
      `${OPT}/lib`,
      `${OPT}/bin/node`,
      `${OPT}/app/dist/cli/orchestrator.js`,
    ];
    return [
      `ENTRYPOINT ${JSON.stringify(entry)}`,
      'CMD ["serve"]',
      'ENV PATH=/usr/local/bin:/usr/bin:/bin',
      `ENV HOME=/${ORCHESTRATOR_DATA_DIR}`,
      // Inside a container the API must be reachable from the container network; put TLS or a
      // proxy in front of it as for any other exposed listener.
      'ENV KICI_LISTEN=0.0.0.0:8080',
      `ENV KICI_DATA_DIR=/${ORCHESTRATOR_DATA_DIR}`,
      `USER ${uid}:${uid}`,
      `VOLUME /${ORCHESTRATOR_DATA_DIR}`,
      'EXPOSE 8080',
      `WORKDIR /${ORCHESTRATOR_DATA_DIR}`,
      `LABEL org.opencontainers.image.version=${version}`,
    ];
  });
}

async function build(
  o: ImageBuildOptions,
  ref: string,
  owned: OwnedPath[],
  recipe: (stage: string, loader: string) => string[],
): Promise<string> {
  const started = Date.now();
  await checkEngines(o.engines);
  const nodeBin = realpathSync(o.node || process.execPath);
  const work = mkdtempSync(join(tmpdir(), 'kici-image-'));
  try {
    const stage = join(work, 'rootfs');
    const loader = stageNode(stage, nodeBin, o.say);
    stageShell(stage, o.say);
    const changes = recipe(stage, loader);
    const tarFile = join(work, 'rootfs.tar');
    await packRootfs(stage, tarFile, owned);
    for (const host of o.engines.hosts) {
      o.say(`importing into ${host} as ${ref}`);
      const size = await importRootfs(host, tarFile, ref, changes);
      const secs = ((Date.now() - started) / 1000).toFixed(1);
      o.say(`${host}: done at ${secs} s, ${(size / 1e6).toFixed(1)} MB`);
    }
    return ref;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

function distDir(): string {
  const dist = join(ROOT, 'dist');
  if (!existsSync(join(dist, 'cli/agent.js')))
    throw new UserError(`${dist}/cli/agent.js is missing: build the package first (npm run build)`);
  return dist;
}

function packageDependencies(): Record<string, string> {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
    dependencies?: Record<string, string>;
  };
  return pkg.dependencies ?? {};
}

/** Files under `dir` (recursively) whose names match `keep`; default: JavaScript only. */
function jsFiles(dir: string, keep: RegExp = /\.js$/): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && keep.test(e.name))
    .map((e) => join(e.parentPath, e.name));
}
