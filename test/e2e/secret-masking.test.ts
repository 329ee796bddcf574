/**
 * A run marks an env value secret; its step prints it whole, in two writes and as base64. Only the
 * mask reaches `job logs`, the live `job logs --follow`, the log rows in the store and the API.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Kysely } from 'kysely';
import { databaseText } from '../helpers/db-text.js';
import { jobGate } from '../helpers/jobs.js';
import {
  ADMIN_BIN,
  bareMetalConfig,
  eventually,
  runNode,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';
import { apiAnswersText } from '../helpers/secret-scan.js';

const SECRET = 'kici-sekret-7f3a9b2c';
const B64 = Buffer.from(SECRET).toString('base64');

let t: TestOrchestrator;
beforeAll(async () => {
  t = await startTestOrchestrator({ config: bareMetalConfig() });
});
afterAll(async () => t?.stop());

const admin = (args: string[]) =>
  runNode([ADMIN_BIN, ...args], { KICI_URL: t.orch.url, KICI_ADMIN_TOKEN: t.orch.adminToken });

interface LogsBody {
  state: string;
  lines: { line: string }[];
}

describe('secrets in run files', () => {
  it('a step that prints a secret leaves only the mask in job logs, the live stream, the store and the API', async () => {
    const gate = await jobGate();
    try {
      const { status, body } = await t.api<{ runId: string; jobs: { id: string }[] }>(
        'POST',
        '/api/v1/runs',
        {
          jobs: {
            deploy: {
              runsOn: ['linux', 'small'],
              env: { DEPLOY_KEY: SECRET },
              secrets: ['DEPLOY_KEY'],
              steps: [
                {
                  name: 'print it',
                  run: [
                    'echo "whole: $DEPLOY_KEY end"',
                    // Two writes that only together make the value.
                    `printf 'split: %s' "\${DEPLOY_KEY%%-*}"; printf '%s end\\n' "-\${DEPLOY_KEY#*-}"`,
                    `printf '%s' "$DEPLOY_KEY" | base64`,
                    'echo "on stderr: $DEPLOY_KEY" >&2',
                    'echo before-gate',
                  ].join('\n'),
                },
                { name: 'hold', run: gate.wait },
                { name: 'again', run: 'echo "after: $DEPLOY_KEY"' },
              ],
            },
          },
        },
      );
      expect(status).toBe(201);
      const jobId = body.jobs[0]!.id;
      const follow = admin(['job', 'logs', jobId, '--follow']);

      // While the job runs: the live answer already holds the lines, masked. stdout and stderr are
      // two pipes, read apart: the last stdout line can arrive before the stderr line, so both are
      // waited for (by a prefix the mask leaves alone, so an unmasked line still fails below).
      const live = await eventually(
        async () => {
          const r = await t.api<LogsBody>('GET', `/api/v1/jobs/${jobId}/logs`);
          const lines = r.body.lines.map((l) => l.line);
          const both = lines.includes('before-gate') && lines.some((l) => l.startsWith('on stderr: '));
          return both && r.body;
        },
        60_000,
        'the first step printed',
      );
      expect(['dispatched', 'running']).toContain(live.state); // the running mark is written in batches
      const liveCli = await admin(['job', 'logs', jobId]).exited;
      expect(liveCli.code).toBe(0);
      expect(live.lines.map((l) => l.line)).toEqual(
        expect.arrayContaining(['whole: *** end', 'split: *** end', '***', 'on stderr: ***']),
      );

      await gate.open();
      const done = await t.waitForJob(jobId);
      expect(done.state, String(done.reason)).toBe('succeeded');
      const followed = await follow.exited;
      const after = await admin(['job', 'logs', jobId]).exited;
      const afterJson = await admin(['job', 'logs', jobId, '--json']).exited;

      expect(after.stdout).toContain('whole: *** end');
      expect(after.stdout).toContain('split: *** end');
      expect(after.stdout).toContain('after: ***');
      expect(followed.stdout).toContain('whole: *** end');
      expect(followed.stdout).toContain('after: ***');

      const store = await databaseText(t.orch.store.db as unknown as Kysely<unknown>);
      // The log rows themselves: read from the tables, not through the API.
      const logRows = store
        .split('\n')
        .filter((l) => l.startsWith('job_logs:') || l.startsWith('job_log_chunks:'))
        .join('\n');
      expect(logRows).toContain('after: ***');
      const api = await apiAnswersText(t, { jobs: [jobId], runs: [body.runId] });
      const seen = {
        live: JSON.stringify(live),
        liveCli: liveCli.stdout + liveCli.stderr,
        followed: followed.stdout + followed.stderr,
        after: after.stdout + after.stderr + afterJson.stdout,
        logRows,
        api,
      };
      for (const [where, text] of Object.entries(seen)) {
        expect(text.includes(SECRET), `${where} holds the secret`).toBe(false);
        expect(text.includes(B64), `${where} holds its base64 form`).toBe(false);
      }
    } finally {
      await gate.close();
    }
  });
});
