import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect } from 'vitest';
import type { TestOrchestrator } from './orchestrator.js';
import { pidsWithEnv } from './processes.js';

/** Submit a run and return its job ids in the order the jobs were given. */
export async function submit(
  t: Pick<TestOrchestrator, 'api'>,
  jobs: Record<string, unknown>,
): Promise<string[]> {
  const run = await t.api<{ jobs: { id: string; name: string }[] }>('POST', '/api/v1/runs', { jobs });
  expect(run.status).toBe(201);
  const names = Object.keys(jobs);
  return names.map((n) => run.body.jobs.find((j) => j.name === n)!.id);
}

/** A job's stored output lines (stdout and stderr), in order. */
export async function outputLines(t: Pick<TestOrchestrator, 'api'>, jobId: string): Promise<string[]> {
  const logs = await t.api<{ lines: { stream: string; line: string }[] }>(
    'GET',
    `/api/v1/jobs/${jobId}/logs`,
  );
  return logs.body.lines.filter((l) => l.stream !== 'system').map((l) => l.line);
}

/** Wait until the job has printed a line matching `re`; returns the first match. */
export async function waitForLine(
  t: TestOrchestrator,
  jobId: string,
  re: RegExp,
  timeoutMs = 30_000,
): Promise<RegExpMatchArray> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    for (const line of await outputLines(t, jobId)) {
      const m = line.match(re);
      if (m) return m;
    }
    if (Date.now() > until) throw new Error(`job ${jobId} printed no line matching ${re}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Is `pid` a live process? A zombie (dead, not yet reaped by its new parent) does not count. */
export async function running(pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/**
 * Jobs whose processes a test must find and count: each carries its own TEST_TAG in its env. Whatever
 * a tagged job left alive is killed (by pid) after each test, so a failing test leaves nothing behind.
 */
export function useTaggedJobs() {
  const tags: string[] = [];
  afterEach(async () => {
    for (const tag of tags.splice(0))
      for (const pid of await pidsWithEnv(`TEST_TAG=${tag}`)) process.kill(pid, 'SIGKILL');
  });
  return {
    job(steps: unknown[], extra: Record<string, unknown> = {}) {
      const tag = randomUUID();
      tags.push(tag);
      return { tag, job: { runsOn: ['linux'], env: { TEST_TAG: tag }, steps, ...extra } };
    },
    /** How many processes carrying the tag are alive. */
    async alive(tag: string): Promise<number> {
      return (await pidsWithEnv(`TEST_TAG=${tag}`)).length;
    },
  };
}

/**
 * A step that runs until the test lets it finish, instead of for a guessed number of seconds (on a
 * loaded host a `sleep 3` can end before the test has looked at the running job). `wait` is a
 * shell command that returns once `open()` was called; `close()` removes the gate's directory.
 */
export async function jobGate(): Promise<{ wait: string; open(): Promise<void>; close(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'kici-gate-'));
  const file = join(dir, 'open');
  return {
    wait: `while [ ! -e '${file}' ]; do sleep 0.05; done`,
    open: () => writeFile(file, ''),
    close: () => rm(dir, { recursive: true, force: true }),
  };
}
