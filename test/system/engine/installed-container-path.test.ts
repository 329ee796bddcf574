/**
 * The container path from the installed package, as an operator follows it: `npm pack` the repo,
 * install the tarball into a fresh prefix (from the npm cache alone), build the agent image with
 * that install's `kici-admin image build-agent`, then run that install's `kici-orchestrator serve`
 * with the API on 127.0.0.1 only and a container scaler using the image just built. A job submitted
 * with the installed `kici-admin` succeeds, and from inside its container the API cannot be reached:
 * the gateway listener answers 404 to everything but the agent endpoint, and the container's own
 * loopback is not the host's.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, realpath, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, describe, expect, it } from 'vitest';
import { ISOLATED_NETWORK_GATEWAY } from '../../../src/scaler/backends/container/network.js';
import {
  containerScaler,
  docker,
  ENGINE,
  ENGINE_SOCKET,
  removeScalerContainers,
} from '../../helpers/engine.js';
import { eventually, NODE, ROOT } from '../../helpers/orchestrator.js';

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(file: string, args: string[], env: NodeJS.ProcessEnv = {}, cwd = ROOT) {
  const child = spawn(file, args, {
    cwd,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += String(d)));
  child.stderr.on('data', (d) => (stderr += String(d)));
  const exited = new Promise<Ran>((res) => child.on('close', (code) => res({ code, stdout, stderr })));
  return { child, exited, output: () => stdout + stderr };
}

const tag = randomBytes(3).toString('hex');
const NAME = `inst-${ENGINE}-${tag}`;
/** Its own tag, so the image the other tests share is never replaced or removed here. */
const IMAGE = `kici-test/agent-installed-${tag}:1`;
let work = '';

afterAll(async () => {
  await removeScalerContainers(NAME);
  await docker
    .getImage(IMAGE)
    .remove({ force: true })
    .catch(() => undefined); // never built: nothing to remove
  if (work) await rm(work, { recursive: true, force: true });
});

/** Run with the agent image's own node: prints each URL's HTTP status, or the connection error. */
const PROBE = `for (const u of process.argv.slice(2)) {
  try { const r = await fetch(u); console.log('probe ' + u + ' ' + r.status); }
  catch (e) { console.log('probe ' + u + ' ' + (e.cause?.code ?? e.message)); }
}`;

/**
 * The installed package's bin dir. A system run names a place for it (KICI_TEST_INSTALL_DIR,
 * scripts/system-test.sh), so this file installs once for both engines: each engine's run then
 * follows the same operator's path from the same install, and the run's slowest lane pays one
 * offline install, not two. Run alone, it installs into its own work dir.
 */
async function installedBin(): Promise<string> {
  const shared = process.env.KICI_TEST_INSTALL_DIR;
  if (!shared) return installFromTarball(work);
  const named = join(shared, 'bin-path');
  const made = await readFile(named, 'utf8').catch(() => undefined);
  if (made) return made;
  const bin = await installFromTarball(await mkdtemp(join(shared, 'install-')));
  // Named only once whole: a run that failed half-way leaves no name to follow.
  await writeFile(`${named}.tmp`, bin);
  await rename(`${named}.tmp`, named);
  return bin;
}

/** `npm pack` and the docs' offline install into a fresh prefix under `into`; returns its bin dir. */
async function installFromTarball(into: string): Promise<string> {
  await chmod(into, 0o755);
  const pack = await run('npm', ['run', '--silent', 'pack', '--', into]).exited;
  expect(pack.code, pack.stderr).toBe(0);
  const tarball = pack.stdout.trim().split('\n').at(-1)!;
  const opt = join(into, 'opt');
  await mkdir(opt);
  const untar = await run('tar', ['-xzf', tarball, '-C', opt]).exited;
  expect(untar.code, untar.stderr).toBe(0);
  const prefix = join(opt, 'package');
  const started = Date.now();
  // The npm cache the repo's own `npm ci` filled: no registry.
  const install = await run('npm', ['ci', '--offline', '--omit=dev', '--no-audit', '--no-fund'], {}, prefix)
    .exited;
  expect(install.code, install.stderr).toBe(0);
  console.log(`npm install of the tarball: ${Date.now() - started} ms`);
  const bin = join(prefix, 'bin');
  await mkdir(bin);
  for (const [name, file] of [
    ['kici-orchestrator', 'orchestrator.js'],
    ['kici-admin', 'admin.js'],
  ] as const)
    await symlink(join(prefix, 'dist/cli', file), join(bin, name));
  return bin;
}

describe(`the container path from the installed package on ${ENGINE}`, () => {
  it('builds the agent image with the installed command, then runs a container job with the API on loopback only', async () => {
    work = await mkdtemp(join(tmpdir(), 'kici-inst-ctr-'));
    await chmod(work, 0o755);
    const bin = await installedBin();
    // Only the pinned Node ahead of the system's tools (nft lives in /usr/sbin).
    const env = {
      PATH: `${dirname(await realpath(NODE))}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
    };

    const started = Date.now();
    const build = await run(
      join(bin, 'kici-admin'),
      ['image', 'build-agent', '--tag', IMAGE, '--host', `unix://${ENGINE_SOCKET}`, '--json'],
      env,
    ).exited;
    expect(build.code, build.stderr).toBe(0);
    expect(JSON.parse(build.stdout)).toEqual({ image: IMAGE });
    console.log(`installed image build-agent: ${Date.now() - started} ms`);

    const config = join(work, 'scalers.yaml');
    await writeFile(
      config,
      stringify({
        version: 1,
        scalers: [
          containerScaler(NAME, { maxAgents: 1 }, [
            { labels: [NAME], image: IMAGE, imagePullPolicy: 'Never' },
          ]),
        ],
      }),
    );
    const tokenFile = join(work, 'admin-token');
    const serve = run(
      join(bin, 'kici-orchestrator'),
      [
        'serve',
        '--listen',
        '127.0.0.1:0',
        '--data-dir',
        join(work, 'data'),
        '--config',
        config,
        '--admin-token-file',
        tokenFile,
      ],
      { ...env, KICI_LOG_LEVEL: 'info' },
    );
    try {
      const url = await Promise.race([
        eventually(() => /"url":"(http:[^"]+)"/.exec(serve.output()), 180_000, 'ready').then((m) => m[1]!),
        serve.exited.then((r) => `exited ${r.code}: ${r.stdout}${r.stderr}`),
      ]);
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const port = new URL(url).port;
      const gw = `http://${ISOLATED_NETWORK_GATEWAY}:${port}`;
      const urls = [`${gw}/api/v1/jobs`, `${gw}/metrics`, `${gw}/`, `http://127.0.0.1:${port}/api/v1/jobs`];
      const runFile = join(work, 'run.yaml');
      await writeFile(
        runFile,
        stringify({
          name: 'installed-container',
          jobs: {
            probe: {
              runsOn: [NAME],
              steps: [
                {
                  // The image's node runs through its own loader and libraries, as the agent does.
                  run: [
                    `cat > kici-probe.mjs <<'EOF'\n${PROBE}\nEOF`,
                    'for L in /opt/kici/lib/ld-*; do break; done',
                    `"$L" --library-path /opt/kici/lib /opt/kici/bin/node kici-probe.mjs ${urls.join(' ')}`,
                  ].join('\n'),
                },
              ],
            },
          },
        }),
      );
      const adminEnv = {
        ...env,
        KICI_URL: url,
        KICI_ADMIN_TOKEN: (await readFile(tokenFile, 'utf8')).trim(),
      };
      const admin = (a: string[]) => run(join(bin, 'kici-admin'), a, adminEnv).exited;
      const submitted = await admin(['job', 'submit', runFile, '--wait']);
      const jobId = /(j-[0-9a-f]{12})/.exec(submitted.stdout)?.[1];
      const logs = jobId ? (await admin(['job', 'logs', jobId])).stdout : '';
      expect(submitted.code, `${submitted.stdout}${submitted.stderr}\n${logs}\n${serve.output()}`).toBe(0);
      const lines = logs.split('\n');
      expect(lines).toContain(`probe ${gw}/api/v1/jobs 404`);
      expect(lines).toContain(`probe ${gw}/metrics 404`);
      expect(lines).toContain(`probe ${gw}/ 404`);
      expect(lines).toContain(`probe http://127.0.0.1:${port}/api/v1/jobs ECONNREFUSED`);
      // From the host, the API answers on loopback.
      expect((await fetch(`${url}/readyz`)).status).toBe(200);

      serve.child.kill('SIGTERM');
      expect((await serve.exited).code).toBe(0);
    } finally {
      if (serve.child.exitCode === null) serve.child.kill('SIGKILL');
    }
  });
});
