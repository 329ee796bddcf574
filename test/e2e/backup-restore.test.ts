import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { outputLines, submit, waitForLine } from '../helpers/jobs.js';
import {
  ADMIN_BIN,
  AGENT_BIN,
  ORCH_BIN,
  alive,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

/**
 * Online backup of the embedded database: `kici-admin backup` while 100 jobs run, restored with
 * `kici-orchestrator restore` into a new data dir and served; every job that had finished
 * before the backup is there with its log. A damaged backup is refused by its checksum.
 */

const JOBS = 100;
let t: TestOrchestrator;
let restored: TestOrchestrator | undefined;
let dir: string;
let live: string | undefined;
const agents: ReturnType<typeof runNode>[] = [];
const admin = (args: string[]) =>
  runNode([ADMIN_BIN, ...args], { KICI_SERVER_URL: t.orch.url, KICI_ADMIN_TOKEN: t.orch.adminToken }).exited;

async function startStaticAgent(agentId: string, label: string) {
  const tok = await t.api<{ token: string }>('POST', '/api/v1/agents/tokens', {
    labels: ['linux', label],
    agentId,
  });
  expect(tok.status).toBe(201);
  agents.push(
    runNode([AGENT_BIN], {
      KICI_ORCHESTRATOR_URL: t.orch.wsUrl,
      KICI_AGENT_ID: agentId,
      KICI_AGENT_TOKEN: tok.body.token,
      KICI_LABELS: `linux,${label}`,
    }),
  );
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-backup-'));
  t = await startTestOrchestrator();
  await startStaticAgent('bk-fast', 'fast');
  await startStaticAgent('bk-hold', 'hold');
});
afterAll(async () => {
  if (live && t) {
    await t.api('POST', `/api/v1/jobs/${live}/cancel`);
    await t.waitForJob(live, ['cancelled'], 30_000);
  }
  for (const a of agents.splice(0)) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGKILL');
  await restored?.stop();
  await t?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('online backup and restore', () => {
  it('a backup taken while jobs run restores every finished job with its log; a damaged one is refused', async () => {
    [live] = await submit(t, { live: { runsOn: ['hold'], steps: [{ run: 'echo holding; sleep 600' }] } });
    await waitForLine(t, live!, /^holding$/);
    // The orchestrator says when a job is final; the backup starts while the rest still run.
    const metrics = t.orch.metrics;
    const original = metrics.jobFinished.bind(metrics);
    let seen = 0;
    const someDone = new Promise<void>((resolve) => {
      metrics.jobFinished = (id, result, now) => {
        original(id, result, now);
        if (++seen === 30) resolve();
      };
    });
    const jobs: Record<string, unknown> = {};
    for (let i = 0; i < JOBS; i++)
      jobs[`j${i}`] = { runsOn: ['fast'], steps: [{ run: `echo out-${i}; echo err-${i} >&2` }] };
    const ids = await submit(t, jobs);
    await someDone;
    const finished = (
      await t.api<{ jobs: { id: string; name: string }[] }>('GET', '/api/v1/jobs?state=succeeded&limit=1000')
    ).body.jobs.filter((j) => ids.includes(j.id));
    const out = join(dir, 'kici.backup');
    const backup = await admin(['backup', '--out', out]);
    expect(backup.code, backup.stderr).toBe(0);
    expect(backup.stdout).toMatch(/^backup written to .*: \d+ bytes, sha256 [0-9a-f]{64}/);
    // Taken while the burst was still running (and the held job throughout).
    expect(finished.length).toBeGreaterThanOrEqual(30);
    expect(finished.length).toBeLessThan(JOBS);

    const newDir = join(dir, 'restored');
    const res = await runNode([ORCH_BIN, 'restore', '--from', out, '--data-dir', newDir]).exited;
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/restored the backup taken/);
    restored = await startTestOrchestrator({ dataDir: newDir });
    for (const j of finished) {
      const got = await restored.api<{ state: string; name: string }>('GET', `/api/v1/jobs/${j.id}`);
      expect(got.body).toMatchObject({ state: 'succeeded', name: j.name });
      const n = j.name.slice(1);
      expect((await outputLines(restored, j.id)).sort()).toEqual([`err-${n}`, `out-${n}`]);
    }

    // Restoring over an existing database, or a damaged file, is refused with the reason.
    const again = await runNode([ORCH_BIN, 'restore', '--from', out, '--data-dir', newDir]).exited;
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/already holds a database/);
    const file = await readFile(out);
    const at = file.length - 100;
    file[at] = file[at]! ^ 0xff;
    const bad = join(dir, 'damaged.backup');
    await writeFile(bad, file);
    const badDir = join(dir, 'from-damaged');
    const refused = await runNode([ORCH_BIN, 'restore', '--from', bad, '--data-dir', badDir]).exited;
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/checksum mismatch .* refusing to restore it/);
    expect(await readdir(badDir).catch(() => [])).not.toContain('pg');
  }, 240_000);
});
