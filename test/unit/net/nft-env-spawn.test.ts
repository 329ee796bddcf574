/**
 * What `nft` is started with where it runs outside the VM backend: the container scalers' shared
 * isolation (the composition root's backendContext), the start-up probe that nft works
 * (startupFindings, for serve and `scaler validate`), and `kici-admin scaler reap-orphans` sweeping
 * on the host. Each is reached as its caller reaches it, with no environment handed in, so this
 * process's counts: it holds an admin token, database credentials and a preload. nft is a stand-in
 * found on PATH that records its environment and answers a listing with an empty one. When these
 * runs inherited the whole environment, every record held all of the variables below.
 */
import { createServer, type Server } from 'node:http';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { Command } from 'commander';
import { pino } from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { registerOrphanCommands } from '../../../src/cli/admin/orphan-commands.js';
import { scalerFileSchema } from '../../../src/config/index.js';
import { startupFindings } from '../../../src/scaler/startup-checks.js';
import { createNftRunner } from '../../../src/net/nft-runner.js';
import { backendContext } from '../../../src/server/scaler-wiring.js';
import type { Store } from '../../../src/store/index.js';
import { HOST_TOOL_ENV_ALLOWLIST } from '../../../src/util/host-tool-env.js';
import { EnvRecorder } from '../../helpers/env-recorder.js';

const SECRETS = {
  KICI_ADMIN_TOKEN: 'admin-token-secret',
  KICI_DATABASE_URL: 'postgres://kici:db-secret@db/kici',
  DATABASE_URL: 'postgres://other-db-secret',
  PGPASSWORD: 'pg-secret',
  // Not a real library: the loader complains and runs nft anyway, so a leak still shows.
  LD_PRELOAD: '/nonexistent/libfaketime.so.1',
  FAKETIME: '+2d',
};
/** The host's language; nft's messages are matched, so it runs in C regardless. */
const HOST_LOCALE = 'fr_FR.UTF-8';

let work: string;
let rec: EnvRecorder;
let hostPath: string;
let configPath: string;
let configFile: unknown;
let engine: Server;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'kici-nftenv-'));
  rec = await EnvRecorder.create(work);
  await rec.tool('nft', `case " $* " in *" list "*) echo '{"nftables":[]}' ;; esac`);
  // An engine that answers the sweep: it is up and has no containers.
  const socketPath = join(work, 'engine.sock');
  engine = createServer((req, res) => {
    if (req.url?.startsWith('/_ping')) return res.end('OK');
    res.setHeader('content-type', 'application/json');
    if (req.url?.startsWith('/containers/json')) return res.end('[]');
    res.statusCode = 404;
    res.end('{"message":"not here"}');
  });
  await new Promise<void>((r) => engine.listen(socketPath, r));
  configPath = join(work, 'scalers.yaml');
  const scaler = { name: 'boxes', type: 'container', maxAgents: 1, socketPath };
  const labelSets = [{ labels: ['box'], image: 'ci/agent:1' }];
  configFile = { version: 1, scalers: [{ ...scaler, labelSets }] };
  await writeFile(configPath, JSON.stringify(configFile));
  hostPath = `${rec.bin}${delimiter}${process.env.PATH ?? ''}`;
  vi.stubEnv('PATH', hostPath);
  for (const [k, v] of Object.entries(SECRETS)) vi.stubEnv(k, v);
  vi.stubEnv('LC_ALL', HOST_LOCALE);
});
afterAll(async () => {
  vi.unstubAllEnvs();
  await new Promise((r) => engine.close(r));
  await rm(work, { recursive: true, force: true });
});
beforeEach(() => rec.forget('nft'));

/** Exactly one nft run so far, and what it got is the allowlist's part of this process's env. */
async function expectOneCleanRun(): Promise<void> {
  const envs = await rec.envsOf('nft');
  expect(envs).toHaveLength(1);
  const env = envs[0]!;
  for (const name of Object.keys(SECRETS)) expect(env, `nft got ${name}`).not.toHaveProperty(name);
  for (const name of Object.keys(env)) expect(HOST_TOOL_ENV_ALLOWLIST, `nft got ${name}`).toContain(name);
  for (const secret of Object.values(SECRETS)) expect(Object.values(env)).not.toContain(secret);
  expect(env.PATH).toBe(hostPath);
  expect(env.LC_ALL).toBe('C');
}

describe("nft outside the VM backend gets none of the orchestrator's environment", () => {
  it('a runner made with no environment of its own (the default)', async () => {
    expect(await createNftRunner().list(['tables'])).toEqual([]);
    await expectOneCleanRun();
  });

  it("the container scalers' shared isolation (backendContext)", async () => {
    const deps = backendContext({ scalerConfigPath: configPath }, pino({ level: 'silent' }), {} as Store);
    expect(await deps.isolation!.listRuled()).toEqual([]);
    await expectOneCleanRun();
  });

  it('the start-up probe that nft works (startupFindings)', async () => {
    const config = scalerFileSchema.parse(configFile);
    const findings = await startupFindings(config, {
      configPath,
      mode: 'validate',
      pingEngine: async () => {},
    });
    expect(findings.filter((f) => /nft/.test(f.problem))).toEqual([]);
    await expectOneCleanRun();
  });

  it('kici-admin scaler reap-orphans sweeping on the host (--force)', async () => {
    const out = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    const exitCode = process.exitCode;
    try {
      const program = new Command().exitOverride();
      registerOrphanCommands(program.command('scaler'), () => Promise.reject(new Error('no API here')));
      const args = ['scaler', 'reap-orphans', '--force', '--dry-run', '--json', '--config', configPath];
      await program.parseAsync(args, { from: 'user' });
      const report = JSON.parse(out.mock.calls.map(([s]) => String(s)).join('')) as { errors: unknown[] };
      expect(report.errors).toEqual([]);
    } finally {
      out.mockRestore();
      process.exitCode = exitCode;
    }
    await expectOneCleanRun();
  });
});
