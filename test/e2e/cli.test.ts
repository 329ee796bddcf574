import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDataDir } from '../helpers/data-dir.js';
import {
  ADMIN_BIN,
  bareMetalConfig,
  eventually,
  ORCH_BIN,
  runNode,
  writeConfig,
} from '../helpers/orchestrator.js';
import { pidsWithEnv } from '../helpers/processes.js';

describe('kici-orchestrator serve and kici-admin, as processes', () => {
  let serve: ReturnType<typeof runNode>;
  let url = '';
  let dataDir = '';
  let files = '';
  const admin = (args: string[], env: NodeJS.ProcessEnv = {}) =>
    runNode([ADMIN_BIN, ...args], {
      KICI_SERVER_URL: url,
      KICI_DATA_DIR: dataDir,
      KICI_ADMIN_TOKEN: '',
      ...env,
    }).exited;

  beforeAll(async () => {
    dataDir = await freshDataDir();
    files = await mkdtemp(join(tmpdir(), 'kici-cli-'));
    const config = await writeConfig(bareMetalConfig());
    serve = runNode(
      [ORCH_BIN, 'serve', '--config', config, '--listen', '127.0.0.1:0', '--data-dir', dataDir],
      { KICI_LOG_LEVEL: 'info' },
    );
    const ready = await eventually(
      () => /"url":"(http:[^"]+)"/.exec(serve.output().stdout),
      30_000,
      'ready log line',
    );
    url = ready[1]!;
  });

  afterAll(async () => {
    if (serve.child.exitCode === null) serve.child.kill('SIGKILL');
    await rm(dataDir, { recursive: true, force: true });
    await rm(files, { recursive: true, force: true });
  });

  it('job submit --wait prints the ids, follows progress and exits 0 when all succeed', async () => {
    const run = join(files, 'ok.yaml');
    await writeFile(
      run,
      stringify({
        name: 'cli',
        jobs: { one: { runsOn: ['linux', 'small'], steps: [{ run: 'echo from-cli' }] } },
      }),
    );
    const res = await admin(['job', 'submit', run, '--wait']);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/run r-[0-9a-f]{12}: 1 job\(s\) submitted/);
    expect(res.stdout).toMatch(/j-[0-9a-f]{12}\s+one\s+succeeded\s+0/);
    const id = /(j-[0-9a-f]{12})/.exec(res.stdout)![1]!;
    const logs = await admin(['job', 'logs', id]);
    expect(logs.code).toBe(0);
    expect(logs.stdout).toContain('from-cli');
    const list = await admin(['job', 'list', '--json']);
    expect(JSON.parse(list.stdout)).toEqual(
      expect.arrayContaining([expect.objectContaining({ id, state: 'succeeded' })]),
    );
  });

  it('job submit --wait exits 1 when a job fails', async () => {
    const run = join(files, 'bad.yaml');
    await writeFile(
      run,
      stringify({ jobs: { boom: { runsOn: ['linux', 'large'], steps: [{ run: 'exit 9' }] } } }),
    );
    const res = await admin(['job', 'submit', run, '--wait']);
    expect(res.code).toBe(1);
    expect(res.stdout).toMatch(/boom\s+failed\s+9/);
  });

  it('an invalid run file is refused with the file and field named, exit 1, no stack trace', async () => {
    const run = join(files, 'invalid.yaml');
    await writeFile(run, stringify({ jobs: { x: { runsOn: ['linux'], steps: [{ name: 'no command' }] } } }));
    const res = await admin(['job', 'submit', run]);
    expect(res.code).toBe(1);
    expect(res.stderr).toContain(`${run}: jobs.x.steps[0].run:`);
    expect(res.stderr).not.toMatch(/\n\s+at /);
    const syntax = join(files, 'syntax.yaml');
    await writeFile(syntax, 'jobs:\n  x: [unclosed\n');
    const res2 = await admin(['job', 'submit', syntax]);
    expect(res2.code).toBe(1);
    expect(res2.stderr).toMatch(new RegExp(`${syntax}:\\d+:\\d+: not valid YAML`));
  });

  it('usage errors exit 2; unreachable servers and missing tokens exit 1 with a message', async () => {
    expect((await admin(['job', 'frobnicate'])).code).toBe(2);
    expect((await admin(['job', 'submit'])).code).toBe(2);
    const down = await admin(['job', 'list'], { KICI_SERVER_URL: 'http://127.0.0.1:9' });
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/cannot reach the orchestrator at http:\/\/127\.0\.0\.1:9/);
    const noToken = await admin(['job', 'list'], {
      KICI_DATA_DIR: files,
      KICI_ADMIN_TOKEN_FILE: join(files, 'no-such-token'),
    });
    expect(noToken.code).toBe(1);
    expect(noToken.stderr).toMatch(/no admin token/);
  });

  it('agent token create mints a static token bound to an id and labels; reserved labels are refused', async () => {
    const res = await admin([
      'agent',
      'token',
      'create',
      '--labels',
      'linux,cli-pool',
      '--id',
      'cli-agent',
      '--json',
    ]);
    expect(res.code).toBe(0);
    const body = JSON.parse(res.stdout) as { agentId: string; token: string };
    expect(body.agentId).toBe('cli-agent');
    expect(body.token).toMatch(/^kici_/);
    const agents = await admin(['agent', 'list']);
    expect(agents.code).toBe(0);
    // A value the server refuses (400) is a usage error, like one the CLI refuses itself.
    const bad = await admin(['agent', 'token', 'create', '--labels', 'kici:os:linux']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/labels: the kici: prefix is reserved/);
  });

  it('scaler status and explain answer', async () => {
    const status = await admin(['scaler', 'status']);
    expect(status.code).toBe(0);
    expect(status.stdout).toMatch(/bm\s+bare-metal/);
  });

  it('SIGTERM stops serve cleanly once its running job is done: exit 0 and no agent left', async () => {
    const run = join(files, 'slow.yaml');
    // The step runs until the test opens its gate, once the server is draining: the job is surely
    // running at SIGTERM and ends during the drain.
    const gate = join(files, 'gate');
    const step = `while [ ! -e '${gate}' ]; do sleep 0.05; done`;
    await writeFile(
      run,
      stringify({ jobs: { slow: { runsOn: ['linux', 'small'], steps: [{ run: step }] } } }),
    );
    const submitted = await admin(['job', 'submit', run]);
    const jobId = /\bj-[0-9a-f]{12}\b/.exec(submitted.stdout)![0];
    const wsUrl = url.replace('http', 'ws') + '/ws';
    // The step's shell carries the job id: once it exists, the job is running.
    await eventually(
      async () => (await pidsWithEnv(`KICI_JOB_ID=${jobId}`)).length > 0,
      15_000,
      'the job running',
    );
    serve.child.kill('SIGTERM');
    await eventually(async () => (await fetch(`${url}/readyz`)).status === 503, 10_000, 'draining');
    await writeFile(gate, '');
    const res = await serve.exited;
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/kici-orchestrator stopped/);
    // The drain lets the job finish (it used to fail it).
    expect(res.stdout).toMatch(new RegExp(`"jobId":"${jobId}".*"state":"succeeded".*job finished`));
    await eventually(
      async () => (await pidsWithEnv(`KICI_ORCHESTRATOR_URL=${wsUrl}`)).length === 0,
      10_000,
      'no agent left',
    );
  });
});

describe('start-up errors', () => {
  it('an invalid scaler config names the file, the path and the problem, and exits 1 without a stack trace', async () => {
    const config = await writeConfig({
      version: 1,
      scalers: [{ name: 'x', type: 'bare-metal', maxAgents: 0, labelSets: [{ labels: ['a'] }] }],
    });
    const dataDir = await freshDataDir();
    const res = await runNode([
      ORCH_BIN,
      'serve',
      '--config',
      config,
      '--listen',
      '127.0.0.1:0',
      '--data-dir',
      dataDir,
    ]).exited;
    expect(res.code).toBe(1);
    expect(res.stderr).toContain(`${config}: scalers[0].maxAgents`);
    expect(res.stderr).toContain(`${config}: scalers[0].labelSets[0].binaryPath`);
    expect(res.stderr).not.toMatch(/\n\s+at /);
    await rm(dataDir, { recursive: true, force: true });
  });

  it('a scaler setting below its minimum: exit 2 from the flag, 1 from the variable, each naming both and the fix', async () => {
    const dataDir = await freshDataDir();
    const serve = ['serve', '--listen', '127.0.0.1:0', '--data-dir', dataDir];
    const flag = await runNode([ORCH_BIN, ...serve, '--scaler-spawn-timeout-ms', '999']).exited;
    expect(flag.code).toBe(2);
    expect(flag.stderr).toContain('--scaler-spawn-timeout-ms: expected whole milliseconds of at least 1000');
    expect(flag.stderr).toContain('Set --scaler-spawn-timeout-ms or KICI_SCALER_SPAWN_TIMEOUT_MS to 1000');
    const env = await runNode([ORCH_BIN, ...serve], { KICI_SCALER_PROVISION_MAX_CONSECUTIVE_FAILURES: '0' })
      .exited;
    expect(env.code).toBe(1);
    expect(env.stderr).toContain('KICI_SCALER_PROVISION_MAX_CONSECUTIVE_FAILURES: expected whole failures');
    const url = await runNode([ORCH_BIN, ...serve, '--orchestrator-url', 'http://ci.example']).exited;
    expect(url.code).toBe(2);
    expect(url.stderr).toContain('--orchestrator-url: expected a ws:// or wss:// URL');
    for (const r of [flag, env, url]) expect(r.stderr).not.toMatch(/\n\s+at /);
    await rm(dataDir, { recursive: true, force: true });
  });
});

describe('npm run demo', () => {
  it('runs at least 20 jobs to success and leaves no process behind', async () => {
    const demo = runNode([ORCH_BIN, 'demo', '--jobs', '20']);
    const res = await demo.exited;
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/jobs succeeded\s+20\n/);
    expect(res.stdout).toMatch(/agents spawned\s+20\n/);
    expect(res.stdout).toMatch(/submit-to-start p50\s+\d+ ms/);
    const ws = /agents dial (ws:\S+)\)/.exec(res.stdout)![1]!;
    expect(await pidsWithEnv(`KICI_ORCHESTRATOR_URL=${ws}`)).toEqual([]);
    // The log the summary names is still there once the demo has removed its temporary data dir.
    const log = /orchestrator log\s+(\S+)/.exec(res.stdout)![1]!;
    expect((await readFile(log, 'utf8')).length).toBeGreaterThan(0);
    await rm(log, { force: true });
  });

  it('Ctrl-C stops it with nothing left running', async () => {
    const demo = runNode([ORCH_BIN, 'demo', '--jobs', '40']);
    const ws = await eventually(
      () => /agents dial (ws:\S+)\)/.exec(demo.output().stdout)?.[1],
      // Deadlines, not waits: generous, so a host loaded by other work still passes.
      120_000,
      'demo started',
    );
    await eventually(
      async () => (await pidsWithEnv(`KICI_ORCHESTRATOR_URL=${ws}`)).length > 0,
      60_000,
      'agents running',
    );
    demo.child.kill('SIGINT');
    const res = await demo.exited;
    expect(res.code).toBe(130);
    expect(res.stdout).toMatch(/agents left running: 0/);
    expect(await pidsWithEnv(`KICI_ORCHESTRATOR_URL=${ws}`)).toEqual([]);
  });
});
