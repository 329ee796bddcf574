/**
 * `kici-admin scaler validate` and `serve` run one list of checks, so serve never stops on something
 * validate passed. For every shipped example and for a table of broken configs: validate lists each
 * problem (naming the file, the YAML path and the fix), serve refuses with exactly those problems,
 * and once the config is fixed as validate said, both pass and serve starts.
 */
import { chmod, mkdir, mkdtemp, readdir, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkScalerConfig } from '../../src/scaler/startup-checks.js';
import { UserError } from '../../src/util/errors.js';
import { AGENT_BIN, NODE, ROOT, startTestOrchestrator } from '../helpers/orchestrator.js';

let work = '';
/** A PATH holding node and nothing else; sbin is not searched, so no host tool leaks in. */
let env: NodeJS.ProcessEnv = {};

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'kici-agree-'));
  const bin = join(work, 'bin');
  await mkdir(bin);
  await symlink(await realpath(NODE), join(bin, 'node'));
  env = { PATH: bin, KICI_SBIN_DIRS: '' };
});
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

type Outcome = { ok: true } | { ok: false; problems: string[] };

async function serveOutcome(configPath: string, hostEnv: NodeJS.ProcessEnv): Promise<Outcome> {
  try {
    const t = await startTestOrchestrator({ scalerConfigPath: configPath, hostEnv });
    await t.stop();
    return { ok: true };
  } catch (err) {
    if (!(err instanceof UserError)) throw err;
    return { ok: false, problems: err.problems };
  }
}

/** Validate's verdict, then serve's: serve fails only on what validate listed (an away engine as a warning). */
async function agree(configPath: string, hostEnv: NodeJS.ProcessEnv) {
  const validated = await checkScalerConfig(configPath, undefined, { mode: 'validate', env: hostEnv });
  const served = await serveOutcome(configPath, hostEnv);
  if (validated.ok && validated.hostWarnings.length === 0) expect(served, configPath).toEqual({ ok: true });
  if (!served.ok) {
    const listed = [...(validated.ok ? [] : validated.problems), ...validated.hostWarnings];
    for (const p of served.problems) expect(listed, `serve refused on ${p}`).toContain(p);
  }
  if (!validated.ok) {
    expect(served.ok, `serve started though validate listed ${validated.problems.join('; ')}`).toBe(false);
    expect(served.ok ? [] : served.problems).toEqual(expect.arrayContaining(validated.problems));
  }
  return { validated, served };
}

async function configFile(name: string, config: unknown): Promise<string> {
  const path = join(work, name, 'scalers.yaml');
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, stringify(config));
  return path;
}

const bareMetal = (binaryPath: string) => ({
  version: 1,
  scalers: [{ name: 'bm', type: 'bare-metal', maxAgents: 1, labelSets: [{ labels: ['linux'], binaryPath }] }],
});

interface Case {
  name: string;
  config: (dir: string) => Promise<unknown>;
  /** Fragments of the problems validate must list, each naming the YAML path. */
  expect: string[];
  env?: (dir: string) => NodeJS.ProcessEnv;
  /** validate only warns (an engine that is away); serve refuses on the same words. */
  warnsOnly?: boolean;
}

const CASES: Case[] = [
  {
    // The PATH holds node alone: neither setpriv (per-agent users) nor bwrap (the sandbox).
    name: 'a bare-metal label set the host cannot confine',
    config: async () => bareMetal(AGENT_BIN),
    expect: ['scalers[0].labelSets[0]', 'no way to keep jobs away', 'trust: host'],
  },
  {
    name: 'missing agent binary',
    config: async (dir) => bareMetal(join(dir, 'no-such-agent')),
    expect: ['scalers[0].labelSets[0].binaryPath', 'does not exist', 'Fix: install kici-agent'],
  },
  {
    name: 'agent binary not executable',
    config: async (dir) => {
      const file = join(dir, 'agent.js');
      await mkdir(dir, { recursive: true });
      await writeFile(file, '');
      await chmod(file, 0o644);
      return bareMetal(file);
    },
    expect: ['scalers[0].labelSets[0].binaryPath', 'is not an executable file', 'chmod +x'],
  },
  {
    name: 'node not on PATH',
    config: async () => bareMetal(AGENT_BIN),
    env: (dir) => ({ PATH: dir, KICI_SBIN_DIRS: '' }),
    expect: ['scalers[0]: scaler "bm": node: node was not found on PATH', 'Fix: install Node.js'],
  },
  {
    name: 'VM scaler: binaries, nft and the disk-guard path all missing (listed at once)',
    config: async (dir) => ({
      version: 1,
      scalers: [
        {
          name: 'vm',
          type: 'firecracker',
          maxAgents: 1,
          firecrackerPath: join(dir, 'firecracker'),
          jailerPath: join(dir, 'jailer-bin'),
          uid: 10000,
          gid: 10000,
          kernelPath: join(dir, 'vmlinux'),
          chrootBaseDir: join(dir, 'jailer'),
          labelSets: [{ labels: ['vm'], rootfsPath: join(dir, 'rootfs.ext4') }],
        },
      ],
    }),
    expect: [
      'scalers[0].firecrackerPath',
      'scalers[0].jailerPath',
      'nft (network isolation): nft was not found',
      'scalers[0].chrootBaseDir',
      'does not exist',
      'mkdir -p',
    ],
  },
  {
    name: 'provisioning template missing',
    config: async () => ({
      version: 1,
      scalers: [
        {
          name: 'cloud',
          type: 'event',
          maxAgents: 1,
          provisioningTargets: ['job:missing.yaml'],
          labelSets: [{ labels: ['gpu'] }],
        },
      ],
    }),
    expect: ['provisioningTargets[0] "job:missing.yaml"'],
  },
  {
    name: 'webhook target without the signing secret',
    config: async () => ({
      version: 1,
      scalers: [
        {
          name: 'hook',
          type: 'event',
          maxAgents: 1,
          provisioningTargets: ['webhook:https://provisioner.invalid/kici'],
          labelSets: [{ labels: ['gpu'] }],
        },
      ],
    }),
    expect: ['scalers[0].provisioningTargets[0]', 'Fix: set KICI_SCALER_WEBHOOK_SECRET'],
  },
  {
    name: 'schema problem',
    config: async () => ({ ...bareMetal(AGENT_BIN), globalMaxAgents: 0 }),
    expect: ['globalMaxAgents: must be greater than 0'],
  },
  {
    name: 'machine-pool ledger directory not writable',
    config: async () => ({
      ...bareMetal(AGENT_BIN),
      machinePools: [{ name: 'p', cap: { maxCpu: 1 } }],
    }),
    env: (dir) => ({ ...env, KICI_MACHINE_LEDGER_DIR: join(dir, 'a-file', 'ledger') }),
    expect: ['machinePools', 'KICI_MACHINE_LEDGER_DIR'],
  },
  {
    name: 'container engine away',
    config: async (dir) => ({
      version: 1,
      scalers: [
        {
          name: 'ctr',
          type: 'container',
          maxAgents: 1,
          socketPath: join(dir, 'engine.sock'),
          networkIsolation: false,
          labelSets: [{ labels: ['c'], image: 'kici-agent:test', imagePullPolicy: 'Never' }],
        },
      ],
    }),
    expect: ['scalers[0].socketPath', 'does not answer', 'Fix: start Docker or Podman'],
    warnsOnly: true,
  },
];

describe('validate and serve agree', () => {
  it.each(CASES)('$name: validate lists it, serve refuses on it', async (c) => {
    const dir = join(work, c.name.replace(/\W+/g, '-'));
    await mkdir(dir, { recursive: true });
    // A file where the ledger case wants a directory: nothing can be created under it.
    await writeFile(join(dir, 'a-file'), '');
    const path = await configFile(c.name.replace(/\W+/g, '-'), await c.config(dir));
    const hostEnv = c.env?.(dir) ?? env;
    const { validated, served } = await agree(path, hostEnv);
    const listed = validated.ok ? validated.hostWarnings : validated.problems;
    expect(validated.ok, listed.join('\n')).toBe(c.warnsOnly === true);
    for (const fragment of c.expect)
      expect(
        listed.some((p) => p.includes(fragment)),
        `${fragment} in\n${listed.join('\n')}`,
      ).toBe(true);
    // Every host problem names the file it is in and the fix.
    for (const p of listed.filter((l) => l.includes('. Fix: '))) expect(p.startsWith(`${path}: `)).toBe(true);
    expect(served.ok).toBe(false);
    if (!served.ok)
      for (const fragment of c.expect) expect(served.problems.some((p) => p.includes(fragment))).toBe(true);
  });

  it('fixed as validate said: both pass and serve starts', async () => {
    // Fixed the way validate's confinement finding offers on a host with neither setpriv nor bwrap.
    const fixed = bareMetal(AGENT_BIN);
    Object.assign(fixed.scalers[0]!.labelSets[0]!, { trust: 'host' });
    const path = await configFile('fixed', fixed);
    const { validated, served } = await agree(path, env);
    expect(validated).toMatchObject({ ok: true, hostWarnings: [] });
    expect(served).toEqual({ ok: true });
  });

  it('every shipped example: serve fails only on what validate listed', async () => {
    const examples = (await readdir(join(ROOT, 'examples'))).filter((f) => /\.ya?ml$/.test(f));
    expect(examples.length).toBeGreaterThan(0);
    for (const f of examples) await agree(join(ROOT, 'examples', f), { ...process.env, ...env });
  });
});
