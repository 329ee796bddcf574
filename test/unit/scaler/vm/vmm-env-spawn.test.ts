/**
 * What the VM backend's host processes really receive. The backend is built as the composition
 * root builds it (createVmBackend, host env left to its default: this process's), with the
 * orchestrator's environment holding an admin token, a database URL and a libfaketime preload.
 * Every program it starts (the KVM probe, the VMM, the jailer, ip, mkfs.ext4, nft) is a stand-in,
 * found on PATH or at its configured path, that appends the environment it was started with
 * (/proc/<pid>/environ) to a file; no bridge, TAP, firewall rule or VM is made on this host. Before
 * the backend built these environments, every dump held all of the variables below.
 */
import { access, constants, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { delimiter, join } from 'node:path';
import { tmpdir } from 'node:os';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { firecrackerNetworkSchema, scalerFileSchema } from '../../../../src/config/index.js';
import type { BackendDeps } from '../../../../src/scaler/backends/deps.js';
import { scrubbed } from '../../../../src/scaler/backends/bare-metal/env.js';
import { createVmBackend } from '../../../../src/scaler/backends/firecracker/index.js';
import { hostTools } from '../../../../src/scaler/backends/firecracker/host-checks.js';
import { InMemoryIpAllocator } from '../../../../src/scaler/backends/firecracker/ip-allocator.js';
import { waitGone } from '../../../../src/scaler/backends/firecracker/vm-process.js';
import { HOST_TOOL_ENV_ALLOWLIST } from '../../../../src/util/host-tool-env.js';
import type { SpawnContext } from '../../../../src/scaler/types.js';
import { systemClock } from '../../../../src/util/clock.js';
import { EnvRecorder } from '../../../helpers/env-recorder.js';
import { writeFakeVmmBins, type FakeVmmBins } from '../../../helpers/fake-vmm-bins.js';
import { spawnContext } from '../../../helpers/spawn-context.js';

/** The orchestrator's own environment, as an operator's unit or a chaos test sets it. */
const LEAKS = {
  KICI_ADMIN_TOKEN: 'admin-tok-leak',
  KICI_DATABASE_URL: 'postgres://kici:pw-leak@db/kici',
  PGPASSWORD: 'pg-pw-leak',
  DATABASE_URL: 'postgres://db-url-leak',
  // A library that does not exist: the loader warns and goes on, so a leak shows in the dump.
  LD_PRELOAD: '/nonexistent/libfaketime.so.1',
  LD_LIBRARY_PATH: '/nonexistent/lib',
  FAKETIME: '-1d',
};
/** A host that speaks another language: the helpers whose messages are matched run in C. */
const HOST_LOCALE = 'de_DE.UTF-8';
const network = firecrackerNetworkSchema.parse({});
let work: string;
let rec: EnvRecorder;
let guest: string;
let bins: FakeVmmBins;
let hostPath: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'kici-vmmenv-'));
  rec = await EnvRecorder.create(work);
  guest = join(work, 'guest');
  await mkdir(guest);
  for (const f of ['vmlinux', 'rootfs.ext4']) await writeFile(join(guest, f), f, { mode: 0o644 });
  bins = await writeFakeVmmBins(join(work, 'fc'));
  await rec.tool('ip');
  await rec.tool('mkfs.ext4');
  await rec.tool('nft', `case " $* " in *" list "*) echo '{"nftables":[]}' ;; esac`);
  // Exits at once: the KVM probe then finds no kernel banner and TCG is chosen.
  await rec.tool('qemu-system-x86_64');
  // The jailer copies its --exec-file into the chroot and runs it there, as the real one does.
  await rec.tool('firecracker', `exec '${bins.firecracker}' "$@"`);
  await rec.tool('jailer', `exec '${bins.jailer}' "$@"`);
  hostPath = `${rec.bin}${delimiter}${process.env.PATH ?? ''}`;
  vi.stubEnv('PATH', hostPath);
  for (const [k, v] of Object.entries(LEAKS)) vi.stubEnv(k, v);
  vi.stubEnv('LC_ALL', HOST_LOCALE);
});
afterAll(async () => {
  vi.unstubAllEnvs();
  await rm(work, { recursive: true, force: true });
});

function entryFor(scaler: Record<string, unknown>) {
  return scalerFileSchema.parse({
    version: 1,
    scalers: [
      {
        type: 'firecracker',
        kernelPath: join(guest, 'vmlinux'),
        chrootBaseDir: join(work, `base-${String(scaler.name)}`),
        maxAgents: 1,
        labelSets: [{ labels: ['vm'], rootfsPath: join(guest, 'rootfs.ext4'), overlayDriveSizeMib: 1 }],
        ...scaler,
      },
    ],
  }).scalers[0]!;
}

const ctxFor = (agentId: string): SpawnContext =>
  spawnContext(agentId, ['vm'], {
    orchestratorUrl: 'ws://127.0.0.1:8080',
    auth: { kind: 'token', token: 'tok-agent-123' },
  });

/** One VM through the backend the composition root would build, then its teardown. */
async function spawnAndDestroy(
  scaler: Record<string, unknown> & { name: string },
  agentId: string,
  vmm: string,
) {
  // No hostEnv: the backend takes this process's environment, as in production. The store is never
  // reached: the allocator is passed in.
  const deps = { logger: pino({ level: 'silent' }), clock: systemClock, configPath: join(work, 's.yaml') };
  const allocator = new InMemoryIpAllocator(scaler.name, network.cidr, network.gateway);
  const entry = entryFor(scaler);
  await mkdir(entry.chrootBaseDir, { recursive: true });
  const backend = await createVmBackend(entry, deps as BackendDeps, allocator);
  const before = await rec.count(vmm);
  const agent = await backend.spawn(ctxFor(agentId));
  // The VMM is running once spawn returns, not necessarily done recording: a teardown now could
  // stop it halfway.
  await vi.waitFor(async () => expect(await rec.count(vmm)).toBe(before + 1), { timeout: 5_000 });
  await backend.destroy(agentId, { reason: 'job-complete' });
  expect(await waitGone(Number(agent.backendRef), 5_000)).toBe(true);
}

/** The helpers whose messages the backend matches. */
const PARSED_TOOLS = ['ip', 'mkfs.ext4', 'nft'];

/**
 * Nothing of the orchestrator's, PATH as the host has it, no other name than the allowlist's, and
 * the host's language except for the helpers whose messages are matched.
 */
function expectClean(name: string, env: Record<string, string>, exact = true): void {
  for (const k of Object.keys(LEAKS)) expect(env, `${name} got ${k}`).not.toHaveProperty(k);
  for (const k of Object.keys(env)) {
    expect(scrubbed(k) || /^LD_|^FAKETIME/.test(k), `${name} got ${k}`).toBe(false);
    if (exact) expect(HOST_TOOL_ENV_ALLOWLIST as readonly string[], `${name} got ${k}`).toContain(k);
  }
  expect(env.LC_ALL, `${name}'s LC_ALL`).toBe(PARSED_TOOLS.includes(name) ? 'C' : HOST_LOCALE);
  expect(env.PATH, `${name}'s PATH`).toBe(hostPath);
  // Not under another name either.
  for (const v of Object.values(LEAKS)) expect(Object.values(env), `${name}'s values`).not.toContain(v);
}

describe("the VM backend's host processes get none of the orchestrator's environment", () => {
  it('qemu: the KVM probe, the VMM, ip, mkfs.ext4 and nft', async () => {
    // Left to PATH like the default qemu binary: the VMM is found through the PATH it is given.
    await spawnAndDestroy({ name: 'vq', vmm: 'qemu' }, 'vq-vm-0a1b2c3d', 'qemu-system-x86_64');
    const kvm = await access('/dev/kvm', constants.R_OK | constants.W_OK).then(
      () => true,
      () => false,
    );
    const qemu = await rec.envsOf('qemu-system-x86_64');
    // The probe runs only where /dev/kvm can be opened; then it is a VMM start like the other.
    expect(qemu.length).toBe(kvm ? 2 : 1);
    for (const env of qemu) expectClean('qemu', env);
    for (const tool of ['ip', 'mkfs.ext4', 'nft']) {
      const envs = await rec.envsOf(tool);
      expect(envs.length, tool).toBeGreaterThan(0);
      for (const env of envs) expectClean(tool, env);
    }
  });

  it('firecracker under the jailer (the only way a config runs it)', async () => {
    const jailed = { firecrackerPath: join(rec.bin, 'firecracker'), jailerPath: join(rec.bin, 'jailer') };
    await spawnAndDestroy({ name: 'vj', ...jailed, uid: 65534, gid: 65534 }, 'vj-vm-0a1b2c3d', 'jailer');
    const [jailer, ...more] = await rec.envsOf('jailer');
    expect(more).toEqual([]);
    expectClean('jailer', jailer!);
    // What the jailer hands on to firecracker (the stand-in's shell adds FAKE_FC_*, PWD and OLDPWD).
    const [inJail, ...again] = await rec.envsOf('firecracker');
    expect(again).toEqual([]);
    expectClean('firecracker in the jail', inJail!, false);
  });

  it("diagnose and provision's tools (hostTools): ip and nft", async () => {
    await rec.forget('ip');
    await rec.forget('nft');
    const tools = hostTools(false, process.env);
    await tools.run('ip', ['-j', 'link', 'show']);
    await tools.nft.list(['tables']);
    for (const tool of ['ip', 'nft']) {
      const envs = await rec.envsOf(tool);
      expect(envs.length, tool).toBe(1);
      expectClean(tool, envs[0]!);
    }
  });
});
