import { chown, mkdir, mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { pidsOfUid } from '../../src/scaler/backends/bare-metal/proc-uids.js';
import {
  AGENT_UID_COUNT,
  AGENT_UID_FIRST,
  AgentUserPool,
} from '../../src/scaler/backends/bare-metal/users.js';
import { outputLines, submit } from '../helpers/jobs.js';
import {
  AGENT_BIN,
  bareMetalConfig,
  eventually,
  scalerIdle,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

/**
 * Per-agent users (`runAsUser: dynamic`, our extension; needs root): each agent runs as its own uid
 * from the pool with a 0700 home, two concurrent agents cannot read each other's files, and the uid
 * is released on destroy and reclaimed after a restart (no leak). Uids come from a range without
 * passwd entries, so no user is created on the host.
 */

let t: TestOrchestrator | undefined;
const strays: string[] = [];
afterEach(async () => {
  await t?.stop();
  t = undefined;
  for (const p of strays.splice(0)) await rm(p, { recursive: true, force: true });
});

const exists = (p: string) =>
  stat(p).then(
    () => true,
    () => false,
  );

describe('bare-metal per-agent users', () => {
  it('two concurrent agents run as different unprivileged uids and cannot read each other’s work dirs', async () => {
    t = await startTestOrchestrator({
      config: bareMetalConfig({ maxAgents: 2 }, [
        { labels: ['linux'], binaryPath: AGENT_BIN, runAsUser: 'dynamic' },
      ]),
    });
    // A rendezvous in /tmp (sticky, world-writable): each job publishes its home, then tries the other's.
    const rv = await mkdtemp(join(tmpdir(), 'kici-users-rv-'));
    strays.push(rv);
    await chownAll(rv);
    const job = (me: string, other: string) => ({
      runsOn: ['linux'],
      steps: [
        {
          run: [
            'echo "uid=$(id -u)"',
            'echo "home-mode=$(stat -c %a "$KICI_WORK_DIR")"',
            'echo secret > "$KICI_WORK_DIR/secret" && echo own-write=ok',
            `echo "$KICI_WORK_DIR" > ${rv}/${me}`,
            `until [ -s ${rv}/${other} ]; do sleep 0.1; done`,
            `cat "$(cat ${rv}/${other})/secret" >/dev/null 2>&1; echo "read-other=$?"`,
            `ls "$(cat ${rv}/${other})" >/dev/null 2>&1; echo "list-other=$?"`,
            'touch /etc/kici-users-probe 2>/dev/null; echo "write-etc=$?"',
          ].join('\n'),
        },
      ],
    });
    const ids = await submit(t, { a: job('a', 'b'), b: job('b', 'a') });
    const jobs = await Promise.all(ids.map((id) => t!.waitForJob(id, undefined, 60_000)));
    const logs = await Promise.all(
      ids.map(async (id) =>
        (await t!.api<{ lines: { line: string }[] }>('GET', `/api/v1/jobs/${id}/logs`)).body.lines
          .map((l) => l.line)
          .join('\n'),
      ),
    );
    expect(
      jobs.map((j) => j.state),
      logs.join('\n---\n'),
    ).toEqual(['succeeded', 'succeeded']);
    const uids: number[] = [];
    for (const id of ids) {
      const lines = await outputLines(t, id);
      const get = (k: string) => lines.find((l) => l.startsWith(`${k}=`))?.slice(k.length + 1);
      const uid = Number(get('uid'));
      uids.push(uid);
      expect(uid).toBeGreaterThanOrEqual(AGENT_UID_FIRST);
      expect(uid).toBeLessThan(AGENT_UID_FIRST + AGENT_UID_COUNT);
      expect(get('home-mode')).toBe('700');
      expect(get('own-write')).toBe('ok');
      expect(get('read-other'), lines.join('\n')).not.toBe('0');
      expect(get('list-other')).not.toBe('0');
      expect(get('write-etc')).not.toBe('0');
    }
    expect(uids[0]).not.toBe(uids[1]);
    // Destroy released both: no process runs as those uids, homes and claims are gone.
    await eventually(() => scalerIdle(t!.orch.scaler!), 15_000, 'agents torn down');
    const pool = new AgentUserPool();
    for (const [i, j] of jobs.entries()) {
      // The release removes the home, then the uid claim: wait for the last of the two.
      await eventually(
        async () => !(await exists(pool.homeOf(j.agentId!))) && (await pool.uidOf(j.agentId!)) === undefined,
        10_000,
        'home and uid claim removed',
      );
      expect(await pidsOfUid(uids[i]!)).toEqual([]);
    }
  });

  it('combines with the sandbox: own uid inside bwrap, own PID namespace, host root read-only', async () => {
    t = await startTestOrchestrator({
      config: bareMetalConfig({}, [
        { labels: ['linux'], binaryPath: AGENT_BIN, runAsUser: 'dynamic', env: { KICI_SANDBOX: 'true' } },
      ]),
    });
    const [id] = await submit(t, {
      both: {
        runsOn: ['linux'],
        steps: [
          {
            run: [
              'echo "uid=$(id -u)"',
              'echo "pid1=$(cat /proc/1/comm)"',
              'echo "caps=$(grep CapEff /proc/self/status | tr -d "[:space:]")"',
              'echo x > "$KICI_WORK_DIR/f" && echo own-write=ok',
              'touch /var/tmp/kici-users-sbx 2>/dev/null; echo "write-host=$?"',
            ].join('\n'),
          },
        ],
      },
    });
    const job = await t.waitForJob(id!, undefined, 60_000);
    const lines = await outputLines(t, id!);
    expect(job.state, lines.join('\n')).toBe('succeeded');
    const get = (k: string) => lines.find((l) => l.startsWith(`${k}=`))?.slice(k.length + 1);
    expect(Number(get('uid'))).toBeGreaterThanOrEqual(AGENT_UID_FIRST);
    expect(get('pid1')).toBe('bwrap');
    expect(get('caps')).toBe('CapEff:0000000000000000');
    expect(get('own-write')).toBe('ok');
    expect(get('write-host')).not.toBe('0');
    expect(await exists('/var/tmp/kici-users-sbx')).toBe(false);
  });

  it('a claim whose agent is gone (crash before release) is reclaimed; a claim with a live process is not', async () => {
    const root = await mkdtemp(join(tmpdir(), 'kici-users-pool-'));
    strays.push(root);
    const pool = new AgentUserPool(root, AGENT_UID_FIRST + 900, 3);
    const a = await pool.acquire('scaler-bare-metal-aaaa0001');
    const b = await pool.acquire('scaler-bare-metal-aaaa0002');
    expect(a.uid).not.toBe(b.uid);
    expect((await stat(a.home)).mode & 0o777).toBe(0o700);
    expect((await stat(a.home)).uid).toBe(a.uid);
    // Agent b is still running (a process holds its uid); agent a crashed and its home is gone.
    const live = spawn('setpriv', [`--reuid=${b.uid}`, `--regid=${b.gid}`, '--clear-groups', 'sleep', '30'], {
      stdio: 'ignore',
    });
    try {
      await eventually(async () => (await pidsOfUid(b.uid)).length > 0, 5_000, 'b runs');
      await rm(a.home, { recursive: true, force: true });
      // A fresh pool (a restarted orchestrator) reads the claims from disk.
      const restarted = new AgentUserPool(root, AGENT_UID_FIRST + 900, 3);
      expect(await restarted.reclaimStale(() => false)).toBe(1);
      expect(await restarted.uidOf('scaler-bare-metal-aaaa0001')).toBeUndefined();
      expect(await restarted.uidOf('scaler-bare-metal-aaaa0002')).toBe(b.uid);
      // The freed uid is handed out again: the range of 3 does not run dry.
      const c = await restarted.acquire('scaler-bare-metal-aaaa0003');
      const d = await restarted.acquire('scaler-bare-metal-aaaa0004');
      expect([c.uid, d.uid]).toContain(a.uid);
      await expect(restarted.acquire('scaler-bare-metal-aaaa0005')).rejects.toThrow(/no free agent uid/);
      // A crash leaves c's claim without a home: the next acquire on a full range reclaims it by itself.
      await rm(c.home, { recursive: true, force: true });
      expect((await restarted.acquire('scaler-bare-metal-aaaa0006')).uid).toBe(c.uid);
    } finally {
      live.kill('SIGKILL');
    }
    expect(await readdir(join(root, '.uids'))).toHaveLength(3);
  });
});

/** Let every agent uid write the rendezvous dir without giving it to one of them: mode 1777 like /tmp. */
async function chownAll(dir: string): Promise<void> {
  await chown(dir, 0, 0);
  await mkdir(dir, { recursive: true });
  await import('node:fs/promises').then((fs) => fs.chmod(dir, 0o1777));
}
