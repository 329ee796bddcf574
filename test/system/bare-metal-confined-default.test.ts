import { type ChildProcess } from 'node:child_process';
import { chmod, cp, mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { ORCH_UID, chownTree, startAs, startOrchestratorAs } from '../helpers/as-user.js';
import { freePort } from '../helpers/crash.js';
import { attackScript, probeResults, victimScript } from '../helpers/confinement-probe.js';
import { outputLines, submit, waitForLine } from '../helpers/jobs.js';
import {
  AGENT_BIN,
  NODE,
  ORCH_BIN,
  startTestOrchestrator,
  type JobBody,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

/**
 * A bare-metal label set with no security key: its jobs cannot act as the operator, whichever
 * confinement the host allows. As root the orchestrator runs each agent as its own uid; as an
 * unprivileged user it runs each agent in the bubblewrap sandbox; with neither, start-up refuses
 * the scaler naming the fix. In each mode a hostile job tries to read the admin token file, the
 * database files, another running agent's workspace and the orchestrator's home, and calls the
 * admin API with whatever it found; every attempt fails. A `trust: host` set running the same job
 * reads the token and gets 200, so the probe can fail.
 */

let base: string | undefined;
let t: TestOrchestrator | undefined;
let child: ChildProcess | undefined;
let stopUser: (() => Promise<void>) | undefined;
afterEach(async () => {
  await t?.stop();
  t = undefined;
  await stopUser?.();
  stopUser = undefined;
  if (child && child.exitCode === null && child.signalCode === null) {
    const done = new Promise((r) => child!.once('exit', r));
    child.kill('SIGTERM');
    await done;
  }
  child = undefined;
  if (base) await rm(base, { recursive: true, force: true });
  base = undefined;
});

type Api = TestOrchestrator['api'];

/** Victim first, then the attack once the victim's work dir is known; the victim is released last. */
async function attack(
  api: Api,
  waitForJob: (id: string) => Promise<JobBody>,
  o: { url: string; tokenFile: string; dataDir: string; home: string; victimOn: string[]; runsOn: string[] },
) {
  const t0 = { api } as TestOrchestrator;
  const [victim] = await submit(t0, { victim: { runsOn: o.victimOn, steps: [{ run: victimScript }] } });
  const work = (await waitForLine(t0, victim!, /^work=(.+)$/, 90_000))[1]!;
  const script = attackScript({
    url: o.url,
    tokenFile: o.tokenFile,
    dataDir: o.dataDir,
    otherWorkDir: work,
    orchestratorHome: o.home,
  });
  const [attacker] = await submit(t0, { attacker: { runsOn: o.runsOn, steps: [{ run: script }] } });
  const done = await waitForJob(attacker!);
  await writeFile(join(work, 'go'), '');
  expect((await waitForJob(victim!)).state).toBe('succeeded');
  expect(done.state).toBe('succeeded');
  return { lines: await outputLines(t0, attacker!), secret: await readFile(o.tokenFile, 'utf8') };
}

function expectConfined(lines: string[], adminToken: string) {
  const r = probeResults(lines);
  const text = lines.join('\n');
  expect(r.get('token'), text).toBe('denied');
  expect(r.get('database'), text).toBe('denied');
  expect(r.get('workspace'), text).toBe('denied');
  expect(r.get('data-entries'), text).toBe('0');
  expect(r.get('home-entries'), text).toBe('0');
  expect(text).not.toContain(adminToken.trim());
  // The API was reached, and refused every secret the job found.
  expect(r.api.length, text).toBeGreaterThan(0);
  for (const status of r.api) expect(status, text).toBe('401');
}

const config = (labelSets: unknown[]) => ({
  version: 1,
  scalers: [{ name: 'bm', type: 'bare-metal', maxAgents: 3, labelSets }],
});

describe('bare-metal jobs are confined by default', () => {
  it('as root: per-agent users; the job reads no secret and the admin API refuses it (trust: host shows the probe works)', async () => {
    expect(process.getuid?.()).toBe(0);
    base = await mkdtemp('/var/tmp/kici-confine-root-');
    // As on a real host: the dirs around the secrets are open; the secrets' own modes must hold.
    await chmod(base, 0o755);
    const dataDir = join(base, 'data');
    await cp(join(inject('templateDataDir'), 'pg'), join(dataDir, 'pg'), { recursive: true });
    await mkdir(join(base, 'etc/kici'), { recursive: true, mode: 0o755 });
    const tokenFile = join(base, 'etc/kici/admin-token');
    t = await startTestOrchestrator({
      dataDir,
      adminTokenFile: tokenFile,
      config: config([
        { labels: ['linux', 'confined'], binaryPath: AGENT_BIN },
        { labels: ['linux', 'trusted'], binaryPath: AGENT_BIN, trust: 'host' },
      ]),
    });
    const status = await t.api<{
      scalers: { confinement: { labelSet: string; mode: string; risk: string | null }[] }[];
    }>('GET', '/api/v1/scaler/status');
    expect(status.body.scalers[0]!.confinement.map((c) => [c.labelSet, c.mode])).toEqual([
      ['confined,linux', 'users'],
      ['linux,trusted', 'host'],
    ]);
    expect(status.body.scalers[0]!.confinement[1]!.risk).toMatch(/unconfined \(trust: host\)/);
    const o = { url: t.orch.url, tokenFile, dataDir, home: '/root', victimOn: ['linux', 'confined'] };
    const confined = await attack(t.api, (id) => t!.waitForJob(id, undefined, 90_000), {
      ...o,
      runsOn: ['linux', 'confined'],
    });
    expectConfined(confined.lines, confined.secret);

    const open = await attack(t.api, (id) => t!.waitForJob(id, undefined, 90_000), {
      ...o,
      runsOn: ['linux', 'trusted'],
    });
    const r = probeResults(open.lines);
    expect(r.get('token'), open.lines.join('\n')).toBe('read');
    expect(r.api).toContain('200');
  });

  it('as an unprivileged user with bubblewrap: the sandbox; the job reads no secret and the admin API refuses it', async () => {
    base = await mkdtemp('/var/tmp/kici-confine-user-');
    const u = await startOrchestratorAs(
      base,
      inject('templateDataDir'),
      config([{ labels: ['linux'], binaryPath: AGENT_BIN }]),
    );
    stopUser = u.stop;
    const status = await u.api<{ scalers: { confinement: { mode: string }[] }[] }>(
      'GET',
      '/api/v1/scaler/status',
    );
    expect(status.body.scalers[0]!.confinement.map((c) => c.mode)).toEqual(['sandbox']);
    expect(u.output()).toContain('jobs are confined by the bubblewrap sandbox');
    // The default token file of a non-root orchestrator: in its home, which the sandbox covers.
    const { lines, secret } = await attack(u.api, (id) => u.waitForJob(id), {
      url: u.url,
      tokenFile: u.tokenFile,
      dataDir: u.dataDir,
      home: u.home,
      victimOn: ['linux'],
      runsOn: ['linux'],
    });
    expectConfined(lines, secret);
  });

  it('unprivileged without bubblewrap: start-up refuses the unconfined scaler, naming the fix', async () => {
    base = await mkdtemp('/var/tmp/kici-confine-nobwrap-');
    await chmod(base, 0o755);
    const home = join(base, 'home');
    const bin = join(base, 'bin');
    await mkdir(home, { mode: 0o700 });
    await mkdir(bin);
    // A PATH with node and nothing else: no bwrap, no setpriv.
    await symlink(NODE, join(bin, 'node'));
    const cfg = join(base, 'scalers.yaml');
    await writeFile(cfg, JSON.stringify(config([{ labels: ['linux'], binaryPath: AGENT_BIN }])));
    const nodeOwner = (await stat(NODE)).uid;
    await chownTree(base, ORCH_UID);
    // The link in its PATH was given away, not the repository's node binary it points at.
    expect((await stat(NODE)).uid).toBe(nodeOwner);
    const port = await freePort();
    const proc = await startAs(
      ORCH_UID,
      home,
      [ORCH_BIN, 'serve', '--listen', `127.0.0.1:${port}`, '--data-dir', join(base, 'data'), '--config', cfg],
      { PATH: bin },
    );
    child = proc.child;
    const exit = await proc.exited;
    expect(exit.code, proc.output()).not.toBe(0);
    expect(proc.output()).toMatch(
      /scalers\[0\]\.labelSets\[0\]: scaler "bm" \[linux\]: no way to keep jobs away/,
    );
    expect(proc.output()).toContain('install bubblewrap');
    expect(proc.output()).toContain('trust: host');
  });
});
