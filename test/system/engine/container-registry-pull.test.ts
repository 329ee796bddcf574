/**
 * Job images from a real registry with htpasswd auth: a job's credentials (secret-store references
 * in the run file) reach the engine's pull and nothing else; wrong or missing credentials fail the
 * spawn with a message naming the image and never a password; an aborted spawn stops its pull.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ensureImage } from '../../../src/scaler/backends/container/pull.js';
import { SECRETS_DIR_ENV } from '../../../src/jobs/image-auth.js';
import { outputLines, submit } from '../../helpers/jobs.js';
import {
  BUSYBOX_IMAGE,
  containerScaler,
  docker,
  ENGINE,
  RecordingIsolation,
  removeScalerContainers,
} from '../../helpers/engine.js';
import { eventually, startTestOrchestrator, type TestOrchestrator } from '../../helpers/orchestrator.js';
import { pushCopy, startRegistry, type TestRegistry } from '../../helpers/registry.js';

const NAME = `regpull-${ENGINE}`;
const PASSWORD = `pw-${randomUUID()}`;
const WRONG = `wrong-${randomUUID()}`;
const TAG = randomUUID().slice(0, 8);

let reg: TestRegistry;
let secrets: string;
const pushed: string[] = [];
let t: TestOrchestrator | undefined;
let logged = '';

beforeAll(async () => {
  reg = await startRegistry({ tls: ENGINE === 'podman', password: PASSWORD });
  secrets = await mkdtemp(join(tmpdir(), 'kici-secrets-'));
  await mkdir(join(secrets, 'ci'), { mode: 0o700 });
  await writeFile(join(secrets, 'ci', 'registry-token'), `${PASSWORD}\n`, { mode: 0o600 });
  await writeFile(join(secrets, 'ci', 'stale-token'), WRONG, { mode: 0o600 });
  process.env[SECRETS_DIR_ENV] = secrets;
  for (const n of ['right', 'wrong', 'none'])
    pushed.push(await pushCopy(docker, reg, BUSYBOX_IMAGE, 'kici/job-test', `${n}-${TAG}`));
}, 120_000);

afterAll(async () => {
  delete process.env[SECRETS_DIR_ENV];
  for (const ref of pushed)
    await docker
      .getImage(ref)
      .remove({ force: true })
      .catch(() => undefined); // never pulled (the refused ones), or pulled and removed here
  await reg?.stop();
  await rm(secrets, { recursive: true, force: true });
});

afterEach(async () => {
  await t?.stop();
  t = undefined;
  await removeScalerContainers(NAME);
});

async function start() {
  logged = '';
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      logged += chunk.toString();
      done();
    },
  });
  t = await startTestOrchestrator({
    host: '0.0.0.0',
    isolation: new RecordingIsolation(),
    logger: pino({ level: 'debug' }, sink),
    config: { version: 1, scalers: [containerScaler(NAME)] },
  });
  return t;
}

/** Everything the orchestrator said about the job: its view, its logs, its own log lines. */
async function everythingShown(t: TestOrchestrator, jobId: string): Promise<string> {
  const view = await t.api('GET', `/api/v1/jobs/${jobId}`);
  const logs = await t.api('GET', `/api/v1/jobs/${jobId}/logs`);
  const status = await t.api('GET', '/api/v1/scaler/status');
  const diagnose = await t.api('GET', '/api/v1/scaler/diagnose');
  return [
    JSON.stringify(view.body),
    JSON.stringify(logs.body),
    JSON.stringify(status.body),
    JSON.stringify(diagnose.body),
    logged,
  ].join('\n');
}

async function provisioningError(t: TestOrchestrator, jobId: string): Promise<string> {
  return eventually(
    async () =>
      (await t.api<{ lastProvisioningError: string | null }>('GET', `/api/v1/jobs/${jobId}`)).body
        .lastProvisioningError ?? undefined,
    90_000,
    'a provisioning error on the job',
  );
}

describe(`job images from a registry with credentials on ${ENGINE}`, () => {
  it('pulls with the job’s credentials and runs the job; the password shows nowhere', async () => {
    const t = await start();
    const [jobId] = await submit(t, {
      pulled: {
        runsOn: [NAME],
        container: {
          image: pushed[0],
          auth: { usernameValue: reg.username, tokenSecret: 'ci:registry-token' },
        },
        steps: [{ run: 'echo pulled-and-ran; test -e /bin/busybox && echo busybox-here' }],
      },
    });
    const job = await t.waitForJob(jobId!, undefined, 120_000);
    const lines = await outputLines(t, jobId!);
    expect(job.state, lines.join('\n')).toBe('succeeded');
    expect(lines).toContain('pulled-and-ran');
    expect(lines).toContain('busybox-here');
    const shown = await everythingShown(t, jobId!);
    // The pull did happen (its progress is on the job's timeline).
    expect(shown).toContain(`pulling image ${pushed[0]}`);
    expect(shown).not.toContain(PASSWORD);
    expect(reg.output()).not.toContain(PASSWORD);
  });

  it('an image already on the engine is used without reading any secret', async () => {
    const t = await start();
    const [jobId] = await submit(t, {
      cached: {
        runsOn: [NAME],
        // Pulled by the test before; the secret named here was never written.
        container: { image: pushed[0], auth: { tokenSecret: 'ci:never-written' } },
        steps: [{ run: 'echo from-cache' }],
      },
    });
    const job = await t.waitForJob(jobId!, undefined, 120_000);
    expect(job.state).toBe('succeeded');
    expect(await everythingShown(t, jobId!)).not.toContain(`pulling image ${pushed[0]}`);
  });

  it('wrong credentials: a classified pull error naming the image, not the password', async () => {
    const t = await start();
    const [jobId] = await submit(t, {
      refused: {
        runsOn: [NAME],
        container: { image: pushed[1], auth: { usernameValue: reg.username, tokenSecret: 'ci:stale-token' } },
        steps: [{ run: 'true' }],
      },
    });
    const err = await provisioningError(t, jobId!);
    expect(err).toContain(`could not pull image ${pushed[1]}`);
    expect(err).toMatch(/unauthorized|authentication/i);
    const shown = await everythingShown(t, jobId!);
    expect(shown).not.toContain(WRONG);
    expect(shown).not.toContain(PASSWORD);
    expect(logged).toMatch(/"kind":"image-pull"/);
  });

  it('no credentials: the pull is refused and the error names the image', async () => {
    const t = await start();
    const [jobId] = await submit(t, {
      anonymous: { runsOn: [NAME], container: { image: pushed[2] }, steps: [{ run: 'true' }] },
    });
    const err = await provisioningError(t, jobId!);
    expect(err).toContain(`could not pull image ${pushed[2]}`);
    expect(err).toMatch(/unauthorized|authentication|basic auth|credentials/i);
  });

  it('a secret missing from the store fails the spawn naming the reference and the file', async () => {
    const t = await start();
    const [jobId] = await submit(t, {
      unset: {
        runsOn: [NAME],
        container: { image: pushed[2], auth: { tokenSecret: 'ci:never-written' } },
        steps: [{ run: 'true' }],
      },
    });
    const err = await provisioningError(t, jobId!);
    expect(err).toContain('secret ci:never-written');
    expect(err).toContain(join(secrets, 'ci', 'never-written'));
  });
});

/**
 * An image none of whose layers the engine has: a busybox container writes `mb` MiB of random
 * bytes, is committed and pushed, and every local copy is removed.
 */
async function pushFreshImage(mb: number): Promise<string> {
  const local = `kici-test/fresh-${TAG}:1`;
  const c = await docker.createContainer({
    Image: BUSYBOX_IMAGE,
    Cmd: ['sh', '-c', `dd if=/dev/urandom of=/fill bs=1048576 count=${mb} 2>/dev/null`],
  });
  try {
    await c.start();
    await c.wait();
    await c.commit({ repo: `kici-test/fresh-${TAG}`, tag: '1' });
  } finally {
    await c.remove({ force: true });
  }
  const ref = await pushCopy(docker, reg, local, 'kici/fresh', `abort-${TAG}`);
  await docker.getImage(local).remove({ force: true });
  return ref;
}

describe(`an aborted spawn stops its pull on ${ENGINE}`, () => {
  it('the abort signal ends the engine pull at once; the image is not left behind', async () => {
    // 64 MiB, not 256: the abort lands 70–90 ms into the pull, and a full pull of 256 MiB took
    // 2.7 s here, so a quarter of that is still far from done when it is aborted. Making and
    // pushing the image is most of this test's time.
    const ref = await pushFreshImage(64);
    pushed.push(ref);
    const authconfig = { username: reg.username, password: PASSWORD, serveraddress: reg.host };
    const abort = new AbortController();
    const progress: string[] = [];
    const began = Date.now();
    const pull = ensureImage(docker, ref, 'IfNotPresent', {
      authconfig,
      signal: abort.signal,
      onProgress: (d) => {
        progress.push(d);
        // The first layer transfer: the engine is now fetching from the registry.
        if (/fs layer|Downloading|Copying blob|Waiting/i.test(d)) abort.abort(new Error('spawn deadline'));
      },
    });
    await expect(pull).rejects.toThrow(new RegExp(`could not pull image ${ref}`));
    const abortedAfterMs = Date.now() - began;
    expect(abort.signal.aborted, progress.join('\n')).toBe(true);
    expect(progress).not.toContain(`pulled image ${ref}`);
    await expect(docker.getImage(ref).inspect()).rejects.toMatchObject({ statusCode: 404 });
    // The engine is not wedged: the same pull without a signal completes.
    const again = Date.now();
    await ensureImage(docker, ref, 'IfNotPresent', { authconfig, onProgress: () => undefined });
    const fullPullMs = Date.now() - again;
    await docker.getImage(ref).inspect();
    console.log(`[${ENGINE}] pull aborted after ${abortedAfterMs} ms; a full pull took ${fullPullMs} ms`);
  });
});
