/**
 * `npm run bench -- soak [--jobs N] [--every N] [--rate R]`: a long run of short jobs through a real server
 * (embedded store on disk) and 4 real agents, with retention set to minutes, sampled every
 * `--every` jobs: database bytes (and the data dir on disk), RSS, dispatch latency p50/p99 and CPU per job. The samples are
 * printed as they come and drawn into docs/soak.svg; each figure at the end should be within 1.2x
 * of its value after the first 10,000 jobs (the first fifth of a shorter run).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { BenchResult } from './stats.ts';
import { soakSvg, type SoakSample } from './soak-chart.ts';

const ROOT = resolve(import.meta.dirname, '..');
const NODE = process.execPath;
const TICK_MS = 10; // USER_HZ is 100 on Linux

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};

async function freePort(): Promise<number> {
  return new Promise((res) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
  });
}

async function dirBytes(dir: string): Promise<number> {
  let sum = 0;
  for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    const p = join(dir, e.name);
    if (e.isDirectory()) sum += await dirBytes(p);
    else if (e.isFile()) sum += (await stat(p).catch(() => ({ size: 0 }))).size;
  }
  return sum;
}

async function cpuMs(pid: number): Promise<number> {
  const f = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) * TICK_MS;
}

async function rssBytes(pid: number): Promise<number> {
  const st = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(st)?.[1] ?? 0) * 1024;
}

// Nearest rank: with 200 probes, p99 is the 198th value, not the largest one.
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(s.length * p) - 1))] ?? NaN;
};
const PROBES = 200;

export async function benchSoak(): Promise<BenchResult[]> {
  const total = arg('jobs', 50_000);
  const every = arg('every', Math.max(500, Math.round(total / 20)));
  // Paced, so the reference sample (10,000 jobs, about 170 s in) comes after every retention window
  // (the longest is 120 s, plus a 15 s prune interval) has filled: from there on the stored rows
  // should hold level. Unpaced, this host runs about 200 jobs a second and the run ends first.
  const rate = arg('rate', 60);
  const dir = await mkdtemp(join(tmpdir(), 'kici-soak-'));
  const marks = join(dir, 'marks');
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const children: ChildProcess[] = [];
  const server = spawn(
    NODE,
    [
      join(ROOT, 'dist/cli/orchestrator.js'),
      'serve',
      '--listen',
      `127.0.0.1:${port}`,
      '--data-dir',
      join(dir, 'data'),
      '--admin-token-file',
      join(dir, 'admin-token'),
    ],
    {
      env: {
        ...process.env,
        KICI_LOG_LEVEL: 'warn',
        // Retention of a minute or two, pruned every 15 s: the database should level off, not grow.
        KICI_RETAIN_JOBS: '60',
        KICI_RETAIN_TOMBSTONES: '120',
        KICI_RETAIN_EVENTS: '60',
        KICI_RETAIN_AUDIT: '60',
        KICI_RETAIN_TOKENS: '60',
        KICI_RETAIN_SPAWNS: '60',
        KICI_PRUNE_INTERVAL: '15',
      },
      stdio: 'ignore',
    },
  );
  children.push(server);
  try {
    for (let i = 0; ; i++) {
      if (
        await fetch(`${url}/readyz`).then(
          (r) => r.ok,
          () => false,
        )
      )
        break;
      if (i > 1200) throw new Error('the soak server did not get ready');
      await new Promise((r) => setTimeout(r, 100));
    }
    const token = (await readFile(join(dir, 'admin-token'), 'utf8')).trim();
    const api = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
      const r = await fetch(`${url}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${token}`,
          ...(body ? { 'content-type': 'application/json' } : {}),
        },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      return (await r.json()) as T;
    };
    for (let i = 0; i < 4; i++) {
      const tok = await api<{ token: string }>('POST', '/api/v1/agents/tokens', {
        labels: ['linux', 'soak'],
        agentId: `soak-${i}`,
      });
      children.push(
        spawn(NODE, [join(ROOT, 'dist/cli/agent.js')], {
          env: {
            ...process.env,
            KICI_ORCHESTRATOR_URL: `ws://127.0.0.1:${port}/ws`,
            KICI_AGENT_ID: `soak-${i}`,
            KICI_AGENT_TOKEN: tok.token,
            KICI_LABELS: 'linux,soak',
          },
          stdio: 'ignore',
        }),
      );
    }
    const done = async () => (await readFile(marks, 'utf8').catch(() => '')).length;
    const probe = async () => {
      const lat: number[] = [];
      for (let i = 0; i < PROBES; i++) {
        const res = await api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
          jobs: { l: { runsOn: ['linux', 'soak'], steps: [{ run: 'true' }] } },
        });
        for (;;) {
          const j = await api<{ state: string; createdAt: string; startedAt: string | null }>(
            'GET',
            `/api/v1/jobs/${res.jobs[0]!.id}`,
          );
          if (j.state === 'succeeded') {
            lat.push(new Date(j.startedAt!).getTime() - new Date(j.createdAt).getTime());
            break;
          }
          await new Promise((r) => setTimeout(r, 20));
        }
      }
      return lat;
    };
    const samples: SoakSample[] = [];
    const t0 = performance.now();
    let probeMs = 0;
    let submitted = 0;
    let cpu0 = await cpuMs(server.pid!);
    process.stdout.write(
      `  soak: ${total} jobs, a sample every ${every}\n  jobs      db MiB   disk MiB   RSS MiB   p50 ms   p99 ms   CPU ms/job   min\n`,
    );
    while (submitted < total) {
      const windowEnd = Math.min(total, submitted + every);
      while (submitted < windowEnd) {
        // The probes' time is left out, so a sample's probes are not followed by a catch-up burst.
        const due = t0 + probeMs + (submitted / rate) * 1000;
        if (due > performance.now()) await new Promise((r) => setTimeout(r, due - performance.now()));
        // At most 500 outstanding: a backlog, but not one that grows without bound.
        while (submitted - (await done()) >= 500) await new Promise((r) => setTimeout(r, 50));
        const n = Math.min(100, windowEnd - submitted);
        const jobs = Object.fromEntries(
          Array.from({ length: n }, (_, k) => [
            `j${k}`,
            { runsOn: ['linux', 'soak'], steps: [{ run: `printf x >> ${marks}` }] },
          ]),
        );
        await api('POST', '/api/v1/runs', { jobs });
        submitted += n;
      }
      while ((await done()) < submitted) await new Promise((r) => setTimeout(r, 50));
      const cpu1 = await cpuMs(server.pid!);
      const cpuPerJob = (cpu1 - cpu0) / every;
      const p0 = performance.now();
      const lat = await probe();
      probeMs += performance.now() - p0;
      cpu0 = await cpuMs(server.pid!);
      const s: SoakSample = {
        jobs: submitted,
        dbBytes: Number((await api<{ bytes: number }>('GET', '/api/v1/database')).bytes),
        diskBytes: await dirBytes(join(dir, 'data', 'pg')),
        rssBytes: await rssBytes(server.pid!),
        p50Ms: pct(lat, 0.5),
        p99Ms: pct(lat, 0.99),
        cpuMsPerJob: cpuPerJob,
      };
      samples.push(s);
      process.stdout.write(
        `  ${String(s.jobs).padStart(6)}  ${(s.dbBytes / 2 ** 20).toFixed(1).padStart(7)}  ${(s.diskBytes / 2 ** 20).toFixed(1).padStart(9)}  ${(s.rssBytes / 2 ** 20).toFixed(1).padStart(8)}  ${String(s.p50Ms).padStart(7)}  ${String(s.p99Ms).padStart(7)}  ${s.cpuMsPerJob.toFixed(2).padStart(11)}  ${((performance.now() - t0) / 60_000).toFixed(1).padStart(5)}\n`,
      );
    }
    await writeFile(join(ROOT, 'docs', 'soak.svg'), soakSvg(samples));
    // The reference: the sample after 10,000 jobs, or after the first fifth of a shorter run.
    const ref = samples.find((s) => s.jobs >= Math.min(10_000, total / 5)) ?? samples[0]!;
    const end = samples.at(-1)!;
    const figures: [string, keyof SoakSample, string][] = [
      ['database bytes', 'dbBytes', 'bytes'],
      ['data dir bytes on disk (with the write-ahead log)', 'diskBytes', 'bytes'],
      ['RSS', 'rssBytes', 'bytes'],
      ['dispatch latency p50', 'p50Ms', 'ms'],
      ['dispatch latency p99', 'p99Ms', 'ms'],
      ['CPU per job', 'cpuMsPerJob', 'ms/job'],
    ];
    return figures.map(([name, key, unit]) => {
      const ratio = end[key] / Math.max(ref[key], 1e-9);
      return {
        name: `soak, ${name} at ${end.jobs} jobs vs at ${ref.jobs}`,
        value: end[key],
        unit,
        ratio,
        target: 'at most 1.2x the value at the reference',
        pass: ratio <= 1.2,
        detail: `${ref[key].toFixed(2)} at ${ref.jobs} jobs, ${end[key].toFixed(2)} at ${end.jobs}; chart in docs/soak.svg`,
      };
    });
  } finally {
    for (const c of children) c.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  }
}
