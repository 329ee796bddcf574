/**
 * npm run image:agent — builds the kici-agent container image locally and loads it into the engine
 * DOCKER_HOST names (Docker's socket, or Podman's Docker-compatible one). No registry is involved:
 * the rootfs is assembled here and imported through the engine API, then tagged
 * kici-agent:<package version>, which is printed as the last line.
 *
 * Layout (all under /opt/kici, so a job image can mount it read-only as the injected runtime):
 *   bin/node       the pinned Node binary (stripped), lib/ its shared libraries and loader,
 *   app/           dist/ (only what the agent loads), package.json and the agent's production deps.
 * /bin holds a static busybox for the steps' /bin/sh when the host has one, else dash.
 * The agent is started through the bundled loader, so it runs whatever libc the job image has.
 *
 * Env: DOCKER_HOST (unix:///path; default /var/run/docker.sock), KICI_AGENT_IMAGE_HOSTS (several such
 * sockets, space-separated: the image is staged once and imported into each), KICI_AGENT_IMAGE_TAG (override the
 * reference), KICI_AGENT_IMAGE_NODE (another node binary).
 */
import { execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative } from 'node:path';
import Docker from 'dockerode';

const ROOT = join(import.meta.dirname, '..');
const started = Date.now();
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
const ref = process.env.KICI_AGENT_IMAGE_TAG || `kici-agent:${pkg.version}`;
const nodeBin = realpathSync(process.env.KICI_AGENT_IMAGE_NODE || join(ROOT, 'node_modules/node/bin/node'));
const say = (m: string) => process.stderr.write(`image:agent: ${m}\n`);

if (!existsSync(join(ROOT, 'dist/cli/agent.js')))
  throw new Error('dist/cli/agent.js is missing: run npm run build first');

const stage = mkdtempSync(join(tmpdir(), 'kici-agent-image-'));
try {
  const opt = join(stage, 'opt/kici');
  for (const d of ['bin', 'lib', 'app', 'etc']) mkdirSync(join(opt, d), { recursive: true });
  for (const d of ['bin', 'tmp', 'etc', 'root', 'work']) mkdirSync(join(stage, d), { recursive: true });
  chmodSync(join(stage, 'tmp'), 0o1777);

  // Node and the libraries ldd reports (the loader included), flattened into lib/.
  copyFileSync(nodeBin, join(opt, 'bin/node'));
  try {
    execFileSync('strip', ['--strip-debug', join(opt, 'bin/node')]);
  } catch {
    say('strip not found; the image keeps node debug symbols');
  }
  const libs = sharedLibs(nodeBin);
  let loader = '';
  for (const lib of libs) {
    copyFileSync(realpathSync(lib), join(opt, 'lib', basename(lib)));
    if (/ld-linux|ld-musl/.test(basename(lib))) loader = `/opt/kici/lib/${basename(lib)}`;
  }
  if (!loader) throw new Error(`no dynamic loader found in ldd output of ${nodeBin}`);

  // The agent's modules: dist files reachable from dist/cli/agent.js, and their packages.
  const app = join(opt, 'app');
  const { files, packages } = agentClosure(join(ROOT, 'dist/cli/agent.js'));
  for (const f of files) {
    const to = join(app, relative(ROOT, f));
    mkdirSync(dirname(to), { recursive: true });
    copyFileSync(f, to);
  }
  writeFileSync(
    join(app, 'package.json'),
    JSON.stringify({ name: 'kici-agent-runtime', version: pkg.version, type: 'module' }),
  );
  for (const dir of packageClosure(packages))
    cpSync(dir, join(app, relative(ROOT, dir)), { recursive: true, dereference: true });

  // A shell for the steps: static busybox when the host has one (no libraries needed), else dash.
  const busybox = ['/usr/bin/busybox', '/bin/busybox'].find((p) => existsSync(p));
  if (busybox) {
    copyFileSync(busybox, join(stage, 'bin/busybox'));
    const applets = execFileSync(busybox, ['--list'], { encoding: 'utf8' }).split('\n').filter(Boolean);
    for (const a of applets)
      if (a !== 'busybox' && !a.includes('/')) symlinkSync('busybox', join(stage, 'bin', a));
  } else {
    copyFileSync('/bin/dash', join(stage, 'bin/sh'));
    for (const lib of sharedLibs('/bin/dash'))
      copyFileSync(realpathSync(lib), join(opt, 'lib', basename(lib)));
    say('no busybox on this host: /bin/sh is dash only, with no other tools');
  }
  writeFileSync(join(stage, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\n');
  writeFileSync(join(stage, 'etc/group'), 'root:x:0:\n');

  const cmd = [
    loader,
    '--library-path',
    '/opt/kici/lib',
    '/opt/kici/bin/node',
    '/opt/kici/app/dist/cli/agent.js',
  ];
  const changes = [
    `CMD ${JSON.stringify(cmd)}`,
    'ENV PATH=/usr/local/bin:/usr/bin:/bin',
    'WORKDIR /work',
    // Comma-separated: quotes in a LABEL change are kept literally by Podman's import.
    `LABEL kici.runtime.cmd=${cmd.join(',')}`,
    `LABEL org.opencontainers.image.version=${pkg.version}`,
  ];
  // One staged rootfs, imported into every engine named: KICI_AGENT_IMAGE_HOSTS (space-separated
  // unix:// sockets) when set, else DOCKER_HOST. Staging is most of the cost, so it is done once.
  const hosts = (
    process.env.KICI_AGENT_IMAGE_HOSTS ??
    process.env.DOCKER_HOST ??
    'unix:///var/run/docker.sock'
  )
    .split(/\s+/)
    .filter(Boolean);
  for (const host of hosts) await importInto(host, stage, changes);
  process.stdout.write(`${ref}\n`);
} finally {
  rmSync(stage, { recursive: true, force: true });
}

async function importInto(host: string, stage: string, changes: string[]): Promise<void> {
  if (!host.startsWith('unix://')) throw new Error(`DOCKER_HOST=${host}: only unix:// sockets are supported`);
  const docker = new Docker({ socketPath: host.slice('unix://'.length) });
  const [repo, tag] = splitRef(ref);
  say(`importing into ${host} as ${ref}`);
  const tar = spawn('tar', ['-C', stage, '--numeric-owner', '--owner=0', '--group=0', '-cf', '-', '.'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const out = await docker.importImage(tar.stdout as unknown as string, { repo, tag, changes } as object);
  const events = await new Promise<unknown[]>((ok, fail) =>
    docker.modem.followProgress(out, (e: unknown, res: unknown[]) => (e ? fail(e) : ok(res))),
  );
  // Podman's compatible import ignores the tag; so the imported id is tagged explicitly on both.
  const id = /(sha256:)?[0-9a-f]{64}/.exec(JSON.stringify(events))?.[0];
  if (!id)
    throw new Error(
      `the engine did not report the imported image id: ${JSON.stringify(events).slice(0, 300)}`,
    );
  await docker.getImage(id).tag({ repo, tag });
  if (tag !== 'latest') {
    // Podman also named it <repo>:latest; drop that name (only if it is this very image).
    const latest = await docker
      .getImage(`${repo}:latest`)
      .inspect()
      .catch(() => undefined);
    if (latest && latest.Id.endsWith(id.replace('sha256:', '')))
      await docker
        .getImage(`${repo}:latest`)
        .remove({ noprune: true })
        .catch(() => undefined);
  }
  const info = await docker.getImage(ref).inspect();
  say(`${host}: done at ${((Date.now() - started) / 1000).toFixed(1)} s, ${(info.Size / 1e6).toFixed(1)} MB`);
}

function sharedLibs(bin: string): string[] {
  const out = execFileSync('ldd', [bin], { encoding: 'utf8' });
  const paths: string[] = [];
  for (const line of out.split('\n')) {
    const m = /=>\s*(\/\S+)/.exec(line) ?? /^\s*(\/\S+)/.exec(line);
    if (m) paths.push(m[1]!);
  }
  return paths;
}

/** Relative imports are followed file by file; bare ones name packages (node: builtins skipped). */
function agentClosure(entry: string): { files: Set<string>; packages: Set<string> } {
  const files = new Set<string>();
  const packages = new Set<string>();
  const queue = [entry];
  while (queue.length) {
    const f = queue.pop()!;
    if (files.has(f)) continue;
    files.add(f);
    const src = readFileSync(f, 'utf8');
    for (const m of src.matchAll(/(?:from|import)\s*\(?\s*'([^']+)'/g)) {
      const spec = m[1]!;
      if (spec.startsWith('node:')) continue;
      if (spec.startsWith('.')) queue.push(join(dirname(f), spec));
      else packages.add(spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!);
    }
  }
  return { files, packages };
}

/** Package directories of `names` and their production dependencies, resolved from the repo root. */
function packageClosure(names: Set<string>): Set<string> {
  const dirs = new Set<string>();
  const queue = [...names].map((n) => ({ name: n, from: ROOT }));
  while (queue.length) {
    const { name, from } = queue.pop()!;
    const dir = packageDir(name, from);
    if (dirs.has(dir)) continue;
    dirs.add(dir);
    const meta = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
      dependencies?: Record<string, string>;
    };
    for (const dep of Object.keys(meta.dependencies ?? {})) queue.push({ name: dep, from: dir });
  }
  return dirs;
}

function packageDir(name: string, from: string): string {
  for (let d = from; ; d = dirname(d)) {
    const candidate = join(d, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json')))
      return candidate.startsWith(ROOT) ? candidate : realpathSync(candidate);
    if (dirname(d) === d) break;
  }
  // Fall back to Node's own resolution (hoisted or symlinked layouts).
  return dirname(createRequire(join(from, 'x.js')).resolve(`${name}/package.json`));
}

function splitRef(r: string): [string, string] {
  const at = r.lastIndexOf(':');
  return at > r.lastIndexOf('/') ? [r.slice(0, at), r.slice(at + 1)] : [r, 'latest'];
}
