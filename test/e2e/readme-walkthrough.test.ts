import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  ADMIN_BIN,
  AGENT_BIN,
  alive,
  bareMetalConfig,
  eventually,
  ORCH_BIN,
  ROOT,
  runNode,
  writeConfig,
} from '../helpers/orchestrator.js';
import { pidsWithEnv } from '../helpers/processes.js';

/**
 * The README's "Running a real orchestrator" section, followed as an operator would, on a fresh
 * data dir. The commands are read out of the README's code blocks (only host, port, paths and the
 * minted secrets are substituted), so this test breaks when the README drifts from the product.
 */

/** The shell commands of one README section: continuation lines joined, comments dropped. */
async function sectionCommands(heading: string): Promise<string[]> {
  const readme = await readFile(join(ROOT, 'README.md'), 'utf8');
  const start = readme.indexOf(`\n## ${heading}\n`);
  expect(start, `README has a "${heading}" section`).toBeGreaterThan(0);
  const end = readme.indexOf('\n## ', start + 1);
  const section = readme.slice(start, end === -1 ? undefined : end);
  const out: string[] = [];
  for (const block of section.matchAll(/```sh\n([\s\S]*?)```/g))
    for (const line of block[1]!.replace(/\\\n\s*/g, '').split('\n')) {
      const cmd = line.replace(/\s+#.*$/, '').trim();
      if (cmd) out.push(cmd);
    }
  return out;
}

/** Split a one-line command into leading VAR=value assignments, the program and its arguments. */
function parse(cmd: string): { env: Record<string, string>; argv: string[] } {
  const words = cmd.split(/\s+/);
  const env: Record<string, string> = {};
  if (words[0] === 'export') words.shift();
  while (words.length && /^[A-Z_][A-Z0-9_]*=/.test(words[0]!)) {
    const w = words.shift()!;
    env[w.slice(0, w.indexOf('='))] = w.slice(w.indexOf('=') + 1);
  }
  return { env, argv: words };
}

const BINS: Record<string, string> = {
  'kici-orchestrator': ORCH_BIN,
  'kici-admin': ADMIN_BIN,
  'kici-agent': AGENT_BIN,
};

describe('README: Running a real orchestrator, followed literally', () => {
  const cleanup: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const c of cleanup.reverse()) await c();
  });

  it('serve, a static agent with a listed-then-revoked token, an operator drain, and a draining stop', async () => {
    const cmds = await sectionCommands('Running a real orchestrator');
    const pick = (re: RegExp) => {
      const found = cmds.filter((c) => re.test(c));
      expect(found.length, `one README command matching ${re}`).toBe(1);
      return found[0]!;
    };
    const dataDir = await mkdtemp(join(tmpdir(), 'kici-readme-'));
    const config = await writeConfig(bareMetalConfig());
    cleanup.push(() => rm(dataDir, { recursive: true, force: true }));
    let port = '';
    // Only the machine-specific parts change: paths, the port, and the secrets the server mints.
    const subst = (s: string, extra: Record<string, string> = {}) => {
      let out = s
        .replaceAll('/etc/kici/scalers.yaml', config)
        .replaceAll('/var/lib/kici', dataDir)
        .replaceAll('0.0.0.0:8080', `127.0.0.1:${port || '0'}`)
        .replaceAll('ci.example:8080', `127.0.0.1:${port}`)
        .replaceAll('127.0.0.1:8080', `127.0.0.1:${port}`);
      for (const [k, v] of Object.entries(extra)) out = out.replaceAll(k, v);
      return out;
    };
    const start = (cmd: string, env: Record<string, string> = {}, extra: Record<string, string> = {}) => {
      const p = parse(subst(cmd, extra));
      const bin = BINS[p.argv[0]!];
      expect(bin, `a kici program: ${p.argv[0]}`).toBeDefined();
      const child = runNode([bin!, ...p.argv.slice(1)], { ...env, ...p.env });
      cleanup.push(async () => {
        if (child.child.pid && alive(child.child.pid)) child.child.kill('SIGKILL');
        await child.exited;
      });
      return child;
    };

    // 1. The server, exactly as shown, on a fresh (empty) data dir.
    const serve = start(pick(/^kici-orchestrator serve /), { KICI_LOG_LEVEL: 'info' });
    const ready = await eventually(
      () => /"url":"http:\/\/127\.0\.0\.1:(\d+)"/.exec(serve.output().stdout),
      30_000,
      'the ready log line',
    );
    port = ready[1]!;
    const adminEnv: Record<string, string> = { ...parse(subst(pick(/^export /))).env, KICI_ADMIN_TOKEN: '' };
    expect(adminEnv.KICI_DATA_DIR).toBe(dataDir);
    const admin = async (cmd: string, extra: Record<string, string> = {}) => {
      const r = await start(cmd, adminEnv, extra).exited;
      expect(r.stderr, cmd).toBe('');
      expect(r.code, cmd).toBe(0);
      return r.stdout;
    };
    const adminToken = (await readFile(process.env.KICI_ADMIN_TOKEN_FILE!, 'utf8')).trim();
    const api = async <T>(method: string, path: string, body?: unknown) => {
      const res = await fetch(`http://127.0.0.1:${port}${path}`, {
        method,
        headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      return (await res.json()) as T;
    };
    const jobState = async (id: string) => (await api<{ state: string }>('GET', `/api/v1/jobs/${id}`)).state;
    const runJob = async (runsOn: string[], run: string) =>
      (
        await api<{ jobs: { id: string }[] }>('POST', '/api/v1/runs', {
          jobs: { j: { runsOn, steps: [{ run }] } },
        })
      ).jobs[0]!.id;
    const agentsTable = async () => admin(pick(/^kici-admin agent list$/));
    const stateOf = (table: string, id: string) =>
      table
        .split('\n')
        .map((l) => l.split(/\s{2,}/))
        .find((c) => c[0] === id)?.[2];

    // 2. Mint the static agent's token and start the agent with the shown environment.
    const minted = await admin(pick(/^kici-admin agent token create /));
    const token = /KICI_AGENT_TOKEN=(kici_\S+)/.exec(minted)?.[1];
    const tokenId = /^token id: (tok-\S+)$/m.exec(minted)?.[1];
    expect(token && tokenId).toBeTruthy();
    const agentCmd = pick(/ kici-agent$/);
    const agent = start(agentCmd, {}, { '<token>': token! });
    const agentId = parse(agentCmd).env.KICI_AGENT_ID!;
    await eventually(async () => stateOf(await agentsTable(), agentId) === 'idle', 15_000, 'agent idle');
    const first = await runJob(['linux', 'gpu'], 'echo on the gpu box');
    await eventually(async () => (await jobState(first)) === 'succeeded', 15_000, 'first job');

    // 3. Operator drain: nothing is assigned until resume.
    await admin(pick(/^kici-admin agent drain (?!--)/));
    expect(stateOf(await agentsTable(), agentId)).toBe('draining');
    const held = await runJob(['gpu'], 'echo after resume');
    // A dispatch pass has looked at the job once it says why it waits; the agent was not offered it.
    const waiting = await eventually(
      async () =>
        (await api<{ state: string; waiting: string | null }>('GET', `/api/v1/jobs/${held}`)).waiting,
      15_000,
      'a dispatch decision on the held job',
    );
    expect(waiting).toMatch(/waiting for a matching agent/);
    expect(await jobState(held)).toBe('queued');
    await admin(pick(/^kici-admin agent resume /));
    await eventually(async () => (await jobState(held)) === 'succeeded', 15_000, 'held job');

    // 4. The token is listed, then revoked: the agent is dropped and refused.
    expect(await admin(pick(/^kici-admin agent token list$/))).toMatch(
      new RegExp(`^${tokenId}\\s+${agentId}\\s+static\\s+active`, 'm'),
    );
    expect(await admin(pick(/^kici-admin agent token revoke /), { '<tokenId>': tokenId! })).toMatch(
      `disconnected ${agentId}`,
    );
    expect((await agent.exited).code).toBe(2);
    expect(stateOf(await agentsTable(), agentId)).toBeUndefined();
    expect(await admin(pick(/^kici-admin agent token list$/))).not.toContain(tokenId);

    // 5. SIGTERM the server while a bare-metal job runs: it drains, the job finishes, exit 0.
    // The job runs until the test opens its gate, so it is surely running when SIGTERM lands.
    const gate = join(dataDir, '..', `${basename(dataDir)}.gate`);
    cleanup.push(() => rm(gate, { force: true }));
    const last = await runJob(
      ['linux', 'small'],
      `echo working; while [ ! -e '${gate}' ]; do sleep 0.05; done; echo done`,
    );
    await eventually(async () => (await jobState(last)) === 'running', 30_000, 'bare-metal job running');
    // The scaler's own tokens show with --all, never by default.
    const all = JSON.parse(await admin(`${pick(/^kici-admin agent token list$/)} --all --json`)) as {
      kind: string;
    }[];
    expect(all.map((x) => x.kind)).toContain('ephemeral');
    serve.child.kill('SIGTERM');
    await eventually(
      async () => (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 503,
      5_000,
      '/readyz 503 while draining',
    );
    await writeFile(gate, '');
    const exit = await serve.exited;
    expect(exit.code).toBe(0);
    const finished = exit.stdout
      .split('\n')
      .filter((l) => l.includes('"job finished"'))
      .map((l) => JSON.parse(l) as { jobId: string; state: string });
    expect(finished).toContainEqual(expect.objectContaining({ jobId: last, state: 'succeeded' }));
    expect(await pidsWithEnv(`KICI_ORCHESTRATOR_URL=ws://127.0.0.1:${port}/ws`)).toEqual([]);
  });
});
