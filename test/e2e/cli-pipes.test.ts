import { spawn } from 'node:child_process';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN_BIN,
  bareMetalConfig,
  NODE,
  startTestOrchestrator,
  type TestOrchestrator,
} from '../helpers/orchestrator.js';

/**
 * A command's output must reach a pipe in full before the process exits: the real kici-admin, run
 * by a real shell with its stdout piped into `wc -c`, reading a log of about 32 MiB.
 */

const LINE = 'x'.repeat(63); // 64 bytes with its newline
const LINES = 500_000; // 32,000,000 bytes of step output, under the default log cap

let t: TestOrchestrator;
let files: string;

/** Run a bash command line with the orchestrator's URL and token in its environment. */
function shell(cmd: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn('bash', ['-c', cmd], {
    env: {
      ...process.env,
      KICI_SERVER_URL: t.orch.url,
      KICI_ADMIN_TOKEN: t.orch.adminToken,
      NODE,
      ADMIN: ADMIN_BIN,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += String(d)));
  child.stderr.on('data', (d) => (stderr += String(d)));
  return new Promise((res) => child.on('close', (code) => res({ code, stdout, stderr })));
}

beforeAll(async () => {
  files = await mkdtemp(join(tmpdir(), 'kici-pipes-'));
  t = await startTestOrchestrator({ config: bareMetalConfig() });
});
afterAll(async () => {
  await t?.stop();
  await rm(files, { recursive: true, force: true });
});

describe('output into a pipe', () => {
  it('job logs of a 32 MB log piped into wc -c gives every byte, and exits 0', async () => {
    const sub = await t.api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
      jobs: {
        big: { runsOn: ['linux', 'small'], steps: [{ run: `yes '${LINE}' | head -n ${LINES}` }] },
      },
    });
    expect(sub.status).toBe(201);
    const id = sub.body.jobs[0]!.id;
    const done = await t.waitForJob(id, undefined, 240_000);
    expect(done.state).toBe('succeeded');

    // A file is written synchronously, so it holds the whole output: the reference. The two reads
    // are independent, so they run side by side.
    const toFile = join(files, 'log.txt');
    const [ref, piped] = await Promise.all([
      shell(`"$NODE" "$ADMIN" job logs ${id} > '${toFile}'`),
      shell(`"$NODE" "$ADMIN" job logs ${id} | wc -c; echo "status \${PIPESTATUS[0]}"`),
    ]);
    expect(ref.code, ref.stderr).toBe(0);
    const fileBytes = (await stat(toFile)).size;
    // The step's lines plus the step's header and footer.
    expect(fileBytes).toBeGreaterThan(LINES * 64);

    expect(piped.stderr).toBe('');
    const [count, status] = piped.stdout.trim().split('\n');
    expect(Number(count!.trim())).toBe(fileBytes);
    expect(status).toBe('status 0');
  });
});
