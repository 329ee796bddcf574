import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freshTestDatabase, type TestDatabase } from '../helpers/pg-database.js';
import { bareMetalConfig, startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';

/**
 * The PostgreSQL backup the install guide documents: pg_dump of a database the orchestrator is
 * serving, pg_restore into a new empty database, and an orchestrator on the restored one serves
 * every job with its log.
 */

const dbs: TestDatabase[] = [];
const orchs: TestOrchestrator[] = [];
let dir: string | undefined;
afterAll(async () => {
  for (const t of orchs) await t.stop().catch(() => undefined);
  for (const d of dbs) await d.drop().catch(() => undefined);
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('PostgreSQL backup with pg_dump and pg_restore', () => {
  it('restores every finished job and its log into a new database that then serves', async () => {
    const source = await freshTestDatabase('kici_dump_src');
    const target = await freshTestDatabase('kici_dump_dst');
    dbs.push(source, target);
    const t = await startTestOrchestrator({ databaseUrl: source.url, config: bareMetalConfig() });
    orchs.push(t);
    const jobs = Object.fromEntries(
      Array.from({ length: 6 }, (_, i) => [
        `j${i}`,
        { runsOn: ['linux', 'small'], steps: [{ run: `echo dumped-${i}; echo err-${i} >&2` }] },
      ]),
    );
    const run = await t.api<{ jobs: { id: string; name: string }[] }>('POST', '/api/v1/runs', { jobs });
    expect(run.status).toBe(201);
    const done = await Promise.all(run.body.jobs.map((j) => t.waitForJob(j.id)));
    for (const j of done) expect(j.state).toBe('succeeded');

    // The dump is taken while the orchestrator still serves (a consistent snapshot by itself).
    dir = await mkdtemp(join(tmpdir(), 'kici-pgdump-'));
    const file = join(dir, 'kici.dump');
    execFileSync('pg_dump', ['--format=custom', `--file=${file}`, source.url], { stdio: 'pipe' });
    expect(execFileSync('pg_restore', ['--list', file]).toString()).toMatch(/TABLE DATA public jobs/);
    execFileSync('pg_restore', ['--no-owner', `--dbname=${target.url}`, file], { stdio: 'pipe' });
    await t.stop();
    orchs.pop();

    const r = await startTestOrchestrator({ databaseUrl: target.url, config: bareMetalConfig() });
    orchs.push(r);
    for (const j of run.body.jobs) {
      const got = await r.api<{ state: string }>('GET', `/api/v1/jobs/${j.id}`);
      expect(got.status, j.name).toBe(200);
      expect(got.body.state).toBe('succeeded');
      const logs = await r.api<{ lines: { line: string; stream: string }[] }>(
        'GET',
        `/api/v1/jobs/${j.id}/logs`,
      );
      const i = j.name.slice(1);
      expect(logs.body.lines).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ line: `dumped-${i}`, stream: 'stdout' }),
          expect.objectContaining({ line: `err-${i}`, stream: 'stderr' }),
        ]),
      );
    }
    // And it takes new work on the restored database.
    const next = await r.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: { after: { runsOn: ['linux', 'small'], steps: [{ run: 'echo after-restore' }] } },
    });
    expect(next.status).toBe(201);
    expect((await r.waitForJob(next.body.jobs[0]!.id)).state).toBe('succeeded');
  }, 300_000);
});
