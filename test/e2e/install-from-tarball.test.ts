/**
 * docs/install.md, followed: `npm pack` the built repo, install the tarball into a fresh prefix, and
 * run what was installed (not the repo's dist/) with the pinned Node 24: `--version`, then the
 * systemd unit's own command line on a fresh data dir, with a bare-metal scaler whose binaryPath is
 * the installed kici-agent. The unit files are checked for the settings the docs explain. And the
 * shipped example, copied under a clean root as the docs say: `scaler validate` lists every problem,
 * each is fixed as it says, and the unit's command line then starts on the first try.
 */
import { spawn } from 'node:child_process';
import { chmod, cp, mkdir, mkdtemp, readFile, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parse, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, NODE, ROOT } from '../helpers/orchestrator.js';

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
  return { child, exited, output: () => stdout };
}

/** systemd unit files: `[Section]` then `Key=Value` lines; `#`/`;` comments; repeated keys kept. */
function parseUnit(text: string): Map<string, Map<string, string[]>> {
  const sections = new Map<string, Map<string, string[]>>();
  let current: Map<string, string[]> | undefined;
  for (const [i, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (!line || line.startsWith('#') || line.startsWith(';')) continue;
    const header = /^\[([A-Za-z]+)\]$/.exec(line);
    if (header) {
      current = new Map();
      sections.set(header[1]!, current);
      continue;
    }
    const kv = /^([A-Za-z][A-Za-z0-9]*)=(.*)$/.exec(line);
    if (!kv || !current) throw new Error(`line ${i + 1}: not a [Section] or Key=Value: ${raw}`);
    current.set(kv[1]!, [...(current.get(kv[1]!) ?? []), kv[2]!]);
  }
  return sections;
}

const unitFile = async (name: string) =>
  parseUnit(await readFile(join(ROOT, 'examples/systemd', name), 'utf8'));
const one = (unit: Map<string, Map<string, string[]>>, key: string) => unit.get('Service')?.get(key)?.at(-1);

describe('install from an npm pack tarball (docs/install.md)', () => {
  let work = '';
  let tarball = '';
  let packed: string[] = [];
  let prefix = '';
  let version = '';
  /** PATH with only the pinned Node ahead of the system, as the unit's Environment=PATH would be. */
  let path = '';

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'kici-install-'));
    // Installed as under /usr/local: open to every user, so agents confined to their own uids (the
    // default when this runs as root) can run the installed agent.
    await chmod(work, 0o755);
    version = (JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
    const pack = await run('npm', ['run', '--silent', 'pack', '--', work]).exited;
    expect(pack.code, pack.stderr).toBe(0);
    tarball = pack.stdout.trim().split('\n').at(-1)!;
    const list = await run('tar', ['-tzf', tarball]).exited;
    packed = list.stdout
      .trim()
      .split('\n')
      .map((f) => f.replace(/^package\//, ''));
    path = `${dirname(await realpath(NODE))}:/usr/local/bin:/usr/bin:/bin`;
    // The docs' offline install: unpack the tarball and let `npm ci` install the dependencies the
    // shrinkwrap pins, from the npm cache alone (filled by the repo's own `npm ci`): no registry.
    prefix = join(work, 'opt');
    await mkdir(prefix, { recursive: true });
    const untar = await run('tar', ['-xzf', tarball, '-C', prefix]).exited;
    expect(untar.code, untar.stderr).toBe(0);
    prefix = join(prefix, 'package');
    const started = Date.now();
    const install = await run('npm', ['ci', '--offline', '--omit=dev', '--no-audit', '--no-fund'], {}, prefix)
      .exited;
    expect(install.code, install.stderr).toBe(0);
    console.log(`npm install of the tarball: ${Date.now() - started} ms`);
    // The commands, linked as docs/install.md shows.
    await mkdir(join(prefix, 'bin'));
    for (const [name, file] of [
      ['kici-orchestrator', 'orchestrator.js'],
      ['kici-admin', 'admin.js'],
      ['kici-agent', 'agent.js'],
    ])
      await symlink(join(prefix, 'dist/cli', file!), join(prefix, 'bin', name!));
  });

  afterAll(async () => {
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('packs the commands, the docs, the examples and the licence, and no sources or tests', () => {
    expect(tarball.endsWith(`kici-orchestrator-${version}.tgz`)).toBe(true);
    for (const p of [
      'package.json',
      'npm-shrinkwrap.json',
      'LICENSE',
      'README.md',
      'dist/cli/orchestrator.js',
      'dist/cli/admin.js',
      'dist/cli/agent.js',
      'dist/version.js',
      'dist/image/build.js',
      'docs/install.md',
      'examples/systemd/kici-orchestrator.service',
      'examples/systemd/kici-agent.service',
    ])
      expect(packed, p).toContain(p);
    expect(packed.filter((p) => /^(src|test|scripts|node_modules|\.kici-data)\//.test(p))).toEqual([]);
  });

  it('the installed commands print the version', async () => {
    for (const bin of ['kici-orchestrator', 'kici-admin', 'kici-agent']) {
      // Run through the bin link, so its `#!/usr/bin/env node` line finds Node on PATH.
      const res = await run(join(prefix, 'bin', bin), ['--version'], { PATH: path }).exited;
      expect({ bin, code: res.code, stdout: res.stdout }).toEqual({ bin, code: 0, stdout: `${version}\n` });
    }
  });

  it('the installed image command: without an engine, one line naming DOCKER_HOST and the fix, exit 1', async () => {
    // Building for real needs an engine (the system tier's compose test builds with the same code).
    const missing = `unix://${join(work, 'no-engine.sock')}`;
    const res = await run(join(prefix, 'bin', 'kici-admin'), ['image', 'build-agent'], {
      PATH: path,
      DOCKER_HOST: missing,
      KICI_AGENT_IMAGE_HOSTS: '',
    }).exited;
    expect(res.code, res.stderr).toBe(1);
    expect(res.stderr).toMatch(
      new RegExp(`^Error: no container engine answers at ${missing} \\(DOCKER_HOST\\).*Fix: .*DOCKER_HOST=`),
    );
    expect(res.stderr).not.toMatch(/^\s+at /m);
  });

  it('the systemd units carry the stop settings the docs explain', async () => {
    const orch = await unitFile('kici-orchestrator.service');
    expect([...orch.keys()]).toEqual(['Unit', 'Service', 'Install']);
    const exec = one(orch, 'ExecStart')!.split(/\s+/);
    expect(exec.slice(0, 2)).toEqual(['/usr/local/bin/kici-orchestrator', 'serve']);
    const drain = Number(exec[exec.indexOf('--drain-timeout') + 1]);
    expect(exec).toContain('--drain-timeout');
    expect(drain).toBeGreaterThan(0);
    expect(Number(one(orch, 'TimeoutStopSec'))).toBeGreaterThan(drain);
    expect(one(orch, 'KillMode')).toBe('process');
    expect(exec[exec.indexOf('--listen') + 1]).toMatch(/^127\.0\.0\.1:/);

    const agent = await unitFile('kici-agent.service');
    expect(one(agent, 'ExecStart')).toBe('/usr/local/bin/kici-agent');
    expect(one(agent, 'EnvironmentFile')).toBe('/etc/kici/agent.env');
    expect(one(agent, 'KillMode')).toBe('mixed');
    expect(Number(one(agent, 'TimeoutStopSec'))).toBeGreaterThan(0);
    expect(one(agent, 'RestartPreventExitStatus')).toBe('2');

    // The README's unit excerpt must say the same as the example file.
    const readme = await readFile(join(ROOT, 'README.md'), 'utf8');
    expect(readme).toContain(`--drain-timeout ${drain}\nTimeoutStopSec=${one(orch, 'TimeoutStopSec')}`);
  });

  it('the shipped example: validate lists every problem, fixed as it says, serve starts first time', async () => {
    const bin = (name: string) => join(prefix, 'bin', name);
    // A clean root: the example's absolute paths are moved under it, as if it were the machine's /.
    const root = join(work, 'root');
    const config = join(root, 'etc/kici/scalers.yaml');
    await mkdir(dirname(config), { recursive: true });
    const pkg = prefix;
    await cp(join(pkg, 'examples/provisioning'), join(root, 'etc/kici/provisioning'), { recursive: true });
    const example = parse(await readFile(join(pkg, 'examples/scalers.yaml'), 'utf8')) as {
      scalers: { type: string; labelSets: { image?: string; binaryPath?: string }[] }[];
      firecracker?: unknown;
    };
    // The docs' `sudo -e` step: this host has no container engine and no VMs, so the operator keeps
    // the scalers that need neither (bare-metal process agents and the event scaler).
    example.scalers = example.scalers
      .filter((s) => s.type === 'bare-metal' || s.type === 'event')
      .map((s) => ({ ...s, labelSets: s.labelSets.filter((ls) => !ls.image || ls.binaryPath) }));
    delete example.firecracker;
    await writeFile(config, stringify(example).replace(/(\s)\/(usr|opt|var|srv)\//g, `$1${root}/$2/`));
    const env: Record<string, string> = {
      PATH: path,
      KICI_MACHINE_LEDGER_DIR: join(root, 'var/lib/kici/scaler-ledger'),
    };
    await mkdir(env.KICI_MACHINE_LEDGER_DIR!, { recursive: true });
    const validate = () => run(bin('kici-admin'), ['scaler', 'validate', config, '--json'], env).exited;

    const first = await validate();
    expect(first.code, first.stdout + first.stderr).toBe(1);
    const problems = (JSON.parse(first.stdout) as { problems: string[] }).problems;
    expect(problems.length).toBeGreaterThan(0);
    // Each problem is fixed the way its own words say, or the test cannot follow it and fails.
    for (const p of problems) {
      expect(p.startsWith(`${config}: scalers[`), p).toBe(true);
      const install = /Fix: install kici-agent at (\S+) \(chmod \+x\)/.exec(p);
      const create = /Fix: create it \(mkdir -p (\S+)\)/.exec(p);
      // What the unit's EnvironmentFile would hold.
      const setEnv = /Fix: set (KICI_\w+) in the orchestrator's environment/.exec(p);
      if (install) {
        await mkdir(dirname(install[1]!), { recursive: true });
        await symlink(join(pkg, 'dist/cli/agent.js'), install[1]!);
      } else if (create) await mkdir(create[1]!, { recursive: true });
      else if (setEnv) env[setEnv[1]!] = 'install-test-secret';
      else expect.fail(`no fix the test can follow in: ${p}`);
    }
    const second = await validate();
    expect(second.code, second.stdout).toBe(0);
    expect(JSON.parse(second.stdout)).toMatchObject({ ok: true, warnings: [] });

    const exec = one(await unitFile('kici-orchestrator.service'), 'ExecStart')!.split(/\s+/);
    const swap: Record<string, string> = {
      '--config': config,
      '--data-dir': join(root, 'var/lib/kici'),
      '--listen': '127.0.0.1:0',
    };
    const args = exec.slice(1).map((a, i, all) => swap[all[i - 1]!] ?? a);
    // The unit's Environment= line, moved under the root too.
    const serve = run(bin('kici-orchestrator'), args, {
      ...env,
      KICI_ADMIN_TOKEN_FILE: join(root, 'etc/kici/orchestrator/admin-token'),
      KICI_LOG_LEVEL: 'info',
    });
    try {
      const started = await Promise.race([
        eventually(() => /"url":"(http:[^"]+)"/.exec(serve.output()), 60_000, 'ready').then((m) => m[1]!),
        serve.exited.then((r) => `exited ${r.code}: ${r.stdout}${r.stderr}`),
      ]);
      expect(started).toMatch(/^http:/);
      expect((await fetch(`${started}/readyz`)).status).toBe(200);
      serve.child.kill('SIGTERM');
      expect((await serve.exited).code).toBe(0);
    } finally {
      if (serve.child.exitCode === null) serve.child.kill('SIGKILL');
    }
  });

  it("runs the unit's command line from the install, on a fresh data dir, with the installed agent", async () => {
    const bin = (name: string) => join(prefix, 'bin', name);
    const exec = one(await unitFile('kici-orchestrator.service'), 'ExecStart')!.split(/\s+/);
    // The unit's own arguments, with the machine's paths swapped for temp ones and an ephemeral port.
    const dataDir = join(work, 'var-lib-kici');
    const config = join(work, 'etc-kici', 'scalers.yaml');
    await mkdir(dirname(config));
    await writeFile(
      config,
      stringify({
        version: 1,
        scalers: [
          {
            name: 'local',
            type: 'bare-metal',
            maxAgents: 1,
            labelSets: [{ labels: ['linux', 'install'], binaryPath: bin('kici-agent') }],
          },
        ],
      }),
    );
    const swap: Record<string, string> = {
      '--config': config,
      '--data-dir': dataDir,
      '--listen': '127.0.0.1:0',
    };
    const args = exec.slice(1).map((a, i, all) => swap[all[i - 1]!] ?? a);
    expect(args).toContain('--drain-timeout');

    const serve = run(bin('kici-orchestrator'), args, { PATH: path, KICI_LOG_LEVEL: 'info' });
    try {
      const url = (await eventually(() => /"url":"(http:[^"]+)"/.exec(serve.output()), 60_000, 'ready'))[1]!;
      expect((await fetch(`${url}/readyz`)).status).toBe(200);

      const runFile = join(work, 'run.yaml');
      await writeFile(
        runFile,
        stringify({
          name: 'install',
          jobs: { hello: { runsOn: ['linux', 'install'], steps: [{ run: 'echo installed-ok' }] } },
        }),
      );
      const admin = (a: string[]) =>
        run(bin('kici-admin'), a, {
          PATH: path,
          KICI_SERVER_URL: url,
          KICI_DATA_DIR: dataDir,
          KICI_ADMIN_TOKEN: '',
        }).exited;
      const submitted = await admin(['job', 'submit', runFile, '--wait']);
      expect(submitted.code, submitted.stdout + submitted.stderr).toBe(0);
      const jobId = /(j-[0-9a-f]{12})/.exec(submitted.stdout)![1]!;
      const logs = await admin(['job', 'logs', jobId]);
      expect(logs.stdout).toContain('installed-ok');

      // What systemctl stop sends: one SIGTERM. With no job running, the drain ends at once.
      serve.child.kill('SIGTERM');
      expect((await serve.exited).code).toBe(0);
    } finally {
      if (serve.child.exitCode === null) serve.child.kill('SIGKILL');
    }
  });
});
