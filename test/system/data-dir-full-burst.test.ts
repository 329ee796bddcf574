import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/orch-process.js';
import { AGENT_BIN, ORCH_BIN, alive, eventually, runNode } from '../helpers/orchestrator.js';

/**
 * A data dir that runs out during a burst, down to its last MiB (a loop-mounted 256 MiB ext4
 * image; needs root). A job writes a large log while short jobs wait; the log's own growth crosses
 * the floor, then a filler takes all but the last MiB. Meanwhile /healthz answers every time,
 * /readyz says why it is not ready, no job fails, and the big job's result is kept. Once the
 * space is back every job succeeds with its whole log, and SIGTERM stops the process.
 */

const MiB = 1024 * 1024;
let dir: string;
let mnt: string;
let orch: ReturnType<typeof runNode> | undefined;
const agents: ReturnType<typeof runNode>[] = [];
const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { stdio: 'pipe' });
const freeBytes = () => Number(execFileSync('df', ['--output=avail', '-B1', mnt]).toString().split('\n')[1]);

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-diskburst-'));
  mnt = join(dir, 'mnt');
  sh('truncate', ['-s', '256M', join(dir, 'fs.img')]);
  sh('mkfs.ext4', ['-q', '-F', '-m', '0', join(dir, 'fs.img')]);
  sh('mkdir', ['-p', mnt]);
  sh('mount', ['-o', 'loop', join(dir, 'fs.img'), mnt]);
});
let passed = false;
afterAll(async () => {
  if (orch && !passed)
    process.stderr.write(
      `orchestrator output (last 4000 characters):\n${orch.output().stderr.slice(-4000)}${orch.output().stdout.slice(-4000)}\n`,
    );
  for (const a of agents) if (a.child.pid && alive(a.child.pid)) a.child.kill('SIGKILL');
  if (orch?.child.pid && alive(orch.child.pid)) orch.child.kill('SIGKILL');
  await orch?.exited;
  try {
    sh('umount', [mnt]);
  } catch {
    sh('umount', ['-l', mnt]);
  }
  await rm(dir, { recursive: true, force: true });
});

describe('data dir full during a burst, down to the last MiB', () => {
  it('keeps answering, fails no job, loses no result, and finishes the run once space returns', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    orch = runNode([ORCH_BIN, 'serve', '--listen', `127.0.0.1:${port}`, '--data-dir', join(mnt, 'data')], {
      KICI_DATA_MIN_FREE_MB: '32',
      KICI_LOG_LEVEL: 'info',
    });
    await eventually(async () => (await fetch(`${url}/readyz`)).status === 200, 60_000, 'ready');
    const token = (await readFile(process.env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim();
    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${url}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    for (const [id, label] of [
      ['dfb-big', 'dfb-big'],
      ['dfb-small', 'dfb-small'],
    ] as const) {
      const tok = await api('POST', '/api/v1/agents/tokens', { labels: ['linux', label], agentId: id });
      agents.push(
        runNode([AGENT_BIN], {
          KICI_ORCHESTRATOR_URL: `ws://127.0.0.1:${port}/ws`,
          KICI_AGENT_ID: id,
          KICI_AGENT_TOKEN: String(tok.body.token),
          KICI_LABELS: `linux,${label}`,
        }),
      );
    }
    const [bigAgent] = agents;

    // /healthz is asked every 200 ms for the whole test: every answer must be a quick 200.
    const health = { asked: 0, bad: [] as string[] };
    let phase = 'start';
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const t0 = Date.now();
        const status = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(5_000) }).then(
          (r) => r.status,
          (e: unknown) => String(e),
        );
        health.asked++;
        if (status !== 200 || Date.now() - t0 > 5_000)
          health.bad.push(`${status} after ${Date.now() - t0} ms (${phase})`);
        await new Promise((r) => setTimeout(r, 200));
      }
    })();

    // Leave 40 MiB over the floor: the big job's log (about 32 MB) crosses it by itself.
    sh('fallocate', ['-l', String(freeBytes() - 72 * MiB), join(mnt, 'filler-1')]);
    const big = {
      runsOn: ['dfb-big'],
      steps: [{ run: 'head -c 24000000 /dev/urandom | base64 -w 100; echo END-OF-LOG' }],
    };
    const small = { runsOn: ['dfb-small'], steps: [{ run: 'echo small' }] };
    const jobs: Record<string, unknown> = { big };
    for (let i = 0; i < 20; i++) jobs[`s${i}`] = small;
    const run = await api('POST', '/api/v1/runs', { jobs });
    expect(run.status).toBe(201);
    const ids = Object.fromEntries(
      (run.body.jobs as { id: string; name: string }[]).map((j) => [j.name, j.id]),
    );

    phase = 'the big log fills the disk';
    const low = await eventually(
      async () => {
        // A store busy with the log can answer slowly first (store-unwritable): wait for the disk.
        const r = await fetch(`${url}/readyz`);
        const body = r.status === 503 ? ((await r.json()) as { status: string; problem: string }) : undefined;
        return body?.status === 'disk-low' ? body : undefined;
      },
      180_000,
      'readyz 503 as the log fills the disk',
    );
    expect(low.status).toBe('disk-low');
    expect(low.problem).toMatch(/below the 32 MiB floor/);
    phase = 'disk at its last MiB';
    // Now all but the last MiB.
    sh('fallocate', ['-l', String(Math.max(freeBytes() - MiB, MiB)), join(mnt, 'filler-2')]);
    expect(freeBytes()).toBeLessThan(2 * MiB);

    // The big job ends while the disk is full: the agent says so, and the job is not failed.
    await eventually(
      () => /job \S+ succeeded/.test(bigAgent!.output().stdout + bigAgent!.output().stderr),
      300_000,
      'the big job ran to its end',
    );
    expect((await fetch(`${url}/readyz`)).status).toBe(503);
    for (const id of Object.values(ids)) {
      const state = (await api('GET', `/api/v1/jobs/${id}`)).body.state;
      expect(['queued', 'dispatched', 'running', 'succeeded'], `job ${id}`).toContain(state);
    }
    const refused = await api('POST', '/api/v1/runs', { jobs: { x: small } });
    expect(refused.status).toBe(503);

    phase = 'space returned';
    await rm(join(mnt, 'filler-2'));
    await rm(join(mnt, 'filler-1'));
    await eventually(async () => (await fetch(`${url}/readyz`)).status === 200, 60_000, 'ready again');
    for (const id of Object.values(ids))
      await eventually(
        async () => {
          const state = (await api('GET', `/api/v1/jobs/${id}`)).body.state;
          expect(state, `job ${id}`).not.toBe('failed');
          return state === 'succeeded';
        },
        180_000,
        `job ${id} succeeded`,
      );
    phase = 'reading the big log';
    // The log comes in pages of lines after a given id. Output held while the disk was full is
    // written in slices once space returns, so its tail may still be arriving when the job's
    // result (stored at once) reads succeeded: read on until the last line is there.
    const lines: { id: number; line: string }[] = [];
    await eventually(
      async () => {
        for (;;) {
          const after = lines.length ? `?after=${lines.at(-1)!.id}` : '';
          const page = (await api('GET', `/api/v1/jobs/${ids.big}/logs${after}`)).body.lines as typeof lines;
          if (!page.length) break;
          lines.push(...page);
        }
        return lines.at(-1)?.line === 'END-OF-LOG';
      },
      120_000,
      'the whole big log stored',
    );
    expect(lines.at(-1)?.line).toBe('END-OF-LOG');
    expect(lines.filter((l) => l.line.length === 100).length).toBeGreaterThan(300_000);
    expect(lines.some((l) => /dropped while the data dir/.test(l.line))).toBe(false);

    watching = false;
    await watcher;
    expect(health.asked).toBeGreaterThan(10);
    expect(health.bad).toEqual([]);
    orch.child.kill('SIGTERM');
    expect((await orch.exited).code).toBe(0);
    passed = true;
  }, 900_000);
});
