import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Command } from 'commander';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildAdminProgram } from '../../src/cli/admin/program.js';
import { ADMIN_BIN, runNode, startTestOrchestrator, type TestOrchestrator } from '../helpers/orchestrator.js';

/**
 * The CLI contract, for every kici-admin command: a bad value is a usage error (exit 2), and with
 * `--json` the error is one JSON object `{ error, problems }` on stdout, with nothing on stderr.
 * Values the CLI can judge are judged there; the rest (ids) by a real orchestrator's 400.
 */

const BAD_URL = ['--server', 'not a url'];
let runFile = '';

/**
 * Each command, by its path, with a bad value (or several, one per way to get it wrong). A command
 * added later must be added here.
 */
const badValue = (): Record<string, string[] | string[][]> => ({
  'job submit': ['job', 'submit', runFile, '--wait', '--timeout', 'soon'],
  'job validate': ['job', 'validate', ''],
  'job list': ['job', 'list', '--limit', 'lots'],
  'job get': ['job', 'get', 'bad id'],
  'job logs': ['job', 'logs', 'bad id'],
  'job retry': ['job', 'retry', 'bad id'],
  'job cancel': ['job', 'cancel', 'bad id'],
  'job export-trace': ['job', 'export-trace', '--since', 'soon'],
  'agent list': [...BAD_URL, 'agent', 'list'],
  'agent drain': [
    ['agent', 'drain', 'bad id'],
    ['agent', 'drain', '--selector', ','],
    ['agent', 'drain', 'some-agent', '--all'],
    ['agent', 'drain'],
  ],
  'agent resume': ['agent', 'resume', 'bad id'],
  'agent token create': ['agent', 'token', 'create', '--labels', 'linux', '--ttl', 'soon'],
  'agent token list': [...BAD_URL, 'agent', 'token', 'list'],
  'agent token revoke': ['agent', 'token', 'revoke', 'bad id'],
  'scaler validate': ['scaler', 'validate', ''],
  'scaler schema': ['scaler', 'schema', 'extra'],
  'scaler status': [...BAD_URL, 'scaler', 'status'],
  'scaler explain': ['scaler', 'explain', 'bad id'],
  'scaler reload': [
    [...BAD_URL, 'scaler', 'reload'],
    ['scaler', 'reload', '--timeout', '0'],
    ['scaler', 'reload', '--single', '--timeout', 'soon'],
  ],
  'scaler reap-orphans': [
    [...BAD_URL, 'scaler', 'reap-orphans'],
    ['scaler', 'reap-orphans', '--force', '--config', ''],
  ],
  'scaler orphans': [...BAD_URL, 'scaler', 'orphans'],
  'scaler simulate': [
    ['scaler', 'simulate', '--config', 'p.yaml', '--trace', 't.jsonl', '--agent-idle-ms', 'soon'],
    ['scaler', 'simulate', '--config', 'p.yaml', '--trace', 't.jsonl', '--spawn-ms', 'container'],
  ],
  'scaler audit': [...BAD_URL, 'scaler', 'audit'],
  'scaler reset-backoff': ['scaler', 'reset-backoff', 'bm', '--label-set', ''],
  diagnose: [...BAD_URL, 'diagnose'],
  'event list': ['event', 'list', '--name', 'bad name'],
  'event show': ['event', 'show', 'bad id'],
  'cluster status': [...BAD_URL, 'cluster', 'status'],
  'cluster-settings show': [...BAD_URL, 'cluster-settings', 'show'],
  'cluster-settings set': [
    ['cluster-settings', 'set', 'agent_token_ttl_ms', 'soon'],
    ['cluster-settings', 'set', '--scaler-reap-interval-ms', '10'],
    ['cluster-settings', 'set'],
  ],
  'firecracker list': [...BAD_URL, 'firecracker', 'list'],
  'firecracker verify': [
    ['firecracker', 'verify', '--config', ''],
    ['firecracker', 'verify'],
  ],
  'firecracker provision': ['firecracker', 'provision', '--config', ''],
  'firecracker teardown': ['firecracker', 'teardown', '--record', ''],
  completion: ['completion', 'tcsh'],
  'agent token rotate': ['agent', 'token', 'rotate', 'bad id'],
  'access token create': ['access', 'token', 'create', '--name', 'ops', '--role', 'superuser'],
  'access token list': [...BAD_URL, 'access', 'token', 'list'],
  'access token revoke': ['access', 'token', 'revoke', 'bad id'],
  'audit list': ['audit', 'list', '--since', 'soon'],
  prune: [...BAD_URL, 'prune'],
  backup: ['backup'],
  'image build-agent': [
    ['image', 'build-agent', '--tag', 'Not A Tag'],
    ['image', 'build-agent', '--host', 'tcp://127.0.0.1:2375'],
  ],
  'image build-orchestrator': ['image', 'build-orchestrator', '--tag', 'UPPER/case:1'],
});

function leaves(cmd: Command, path: string[] = []): string[] {
  if (!cmd.commands.length) return [path.join(' ')];
  return cmd.commands.flatMap((c) => leaves(c, [...path, c.name()]));
}

/**
 * The cases are independent, so they run side by side; a few at a time, since forty Node starts at
 * once on a small machine are slower than a short queue of them.
 */
const CONCURRENCY = 4;

async function inBatches<T, R>(
  limit: number,
  items: readonly T[],
  fn: (item: T) => Promise<R>,
): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

let t: TestOrchestrator;
let files = '';

beforeAll(async () => {
  files = await mkdtemp(join(tmpdir(), 'kici-contract-'));
  runFile = join(files, 'run.yaml');
  await writeFile(runFile, 'jobs:\n  a:\n    runsOn: [linux]\n    steps: [{ run: "true" }]\n');
  t = await startTestOrchestrator();
});
afterAll(async () => {
  await t?.stop();
  await rm(files, { recursive: true, force: true });
});

describe('kici-admin: every command, a bad value, --json', () => {
  it('the table covers every command of the program', () => {
    expect(Object.keys(badValue()).sort()).toEqual(leaves(buildAdminProgram()).sort());
  });

  it('each exits 2 and prints one JSON error on stdout, nothing on stderr', async () => {
    const env = { KICI_SERVER_URL: t.orch.url, KICI_ADMIN_TOKEN: t.orch.adminToken, KICI_URL: '' };
    const cases = Object.entries(badValue()).flatMap(([name, v]) =>
      (Array.isArray(v[0]) ? (v as string[][]) : [v as string[]]).map((args) => [name, args] as const),
    );
    const results = await inBatches(CONCURRENCY, cases, async ([name, args]) => {
      const r = await runNode([ADMIN_BIN, ...args, '--json'], env).exited;
      return { name: `${name} (${args.join(' ')})`, ...r };
    });
    const wrong = results.flatMap((r) => {
      let body: { error?: unknown; problems?: unknown } = {};
      try {
        body = JSON.parse(r.stdout) as typeof body;
      } catch {
        // left empty: reported below
      }
      const ok =
        r.code === 2 &&
        r.stderr === '' &&
        typeof body.error === 'string' &&
        Array.isArray(body.problems) &&
        body.problems.length > 0 &&
        body.problems.every((p) => typeof p === 'string');
      return ok ? [] : [`${r.name}: exit ${r.code}, stdout ${r.stdout}, stderr ${r.stderr}`];
    });
    expect(wrong).toEqual([]);
  });

  it('without --json the same error is one line of text on stderr, exit 2', async () => {
    const r = await runNode([ADMIN_BIN, 'job', 'get', 'bad id'], {
      KICI_SERVER_URL: t.orch.url,
      KICI_ADMIN_TOKEN: t.orch.adminToken,
    }).exited;
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^Error: .*bad id.*\n$/);
  });
});
