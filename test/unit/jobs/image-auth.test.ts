import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DEFAULT_REGISTRY_USERNAME,
  ImageAuthError,
  imageAuthSchema,
  registryOf,
  resolveImageAuth,
} from '../../../src/jobs/image-auth.js';
import { parseRunSpec, runSpecSchema } from '../../../src/jobs/run-spec.js';

let dir: string;
const env = () => ({ KICI_SECRETS_DIR: dir });

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kici-secrets-unit-'));
  await mkdir(join(dir, 'ci'));
  await writeFile(join(dir, 'ci', 'token'), 'tok-123\n');
  await writeFile(join(dir, 'ci', 'user'), 'robot');
  await writeFile(join(dir, 'ci', 'empty'), '\n');
});
afterAll(() => rm(dir, { recursive: true, force: true }));

describe('registryOf', () => {
  it('takes a host-looking first component as the registry, else Docker Hub', () => {
    expect(registryOf('alpine:3')).toBe('docker.io');
    expect(registryOf('library/alpine')).toBe('docker.io');
    expect(registryOf('ghcr.io/org/img:1')).toBe('ghcr.io');
    expect(registryOf('127.0.0.1:5000/kici/x:1')).toBe('127.0.0.1:5000');
    expect(registryOf('localhost/x')).toBe('localhost');
  });
});

describe('imageAuthSchema', () => {
  it('wants a token secret reference and refuses a literal token, naming the field and the fix', () => {
    expect(imageAuthSchema.safeParse({ tokenSecret: 'ci:token' }).success).toBe(true);
    const literal = imageAuthSchema.safeParse({ tokenValue: 'hunter2' });
    expect(literal.success).toBe(false);
    expect(literal.error!.issues[0]!.path).toEqual(['tokenValue']);
    expect(literal.error!.issues[0]!.message).toMatch(/tokenSecret/);
    // The refusal never repeats the value it refuses.
    expect(JSON.stringify(literal.error!.issues)).not.toContain('hunter2');
    const none = imageAuthSchema.safeParse({ usernameValue: 'me' });
    expect(none.error!.issues[0]!.path).toEqual(['tokenSecret']);
    const both = imageAuthSchema.safeParse({
      tokenSecret: 'ci:t',
      usernameSecret: 'ci:u',
      usernameValue: 'me',
    });
    expect(both.error!.issues[0]!.message).toMatch(/not both/);
    expect(imageAuthSchema.safeParse({ tokenSecret: 'no-colon' }).success).toBe(false);
    expect(imageAuthSchema.safeParse({ tokenSecret: '../etc:passwd' }).success).toBe(false);
  });

  it('never accepts a reference that could leave the secret store directory', () => {
    fc.assert(
      fc.property(fc.string(), fc.string(), (a, b) => {
        const r = imageAuthSchema.safeParse({ tokenSecret: `${a}:${b}` });
        if (!r.success) return;
        for (const part of [a, b]) {
          expect(part).not.toMatch(/\//);
          expect(part).not.toMatch(/^\./);
          expect(part).not.toBe('');
        }
      }),
    );
  });

  it('is part of a job’s container in a run file', () => {
    const spec = runSpecSchema.parse({
      jobs: {
        a: {
          runsOn: ['x'],
          container: { image: 'ghcr.io/o/i:1', auth: { tokenSecret: 'ci:token' } },
          steps: [{ run: 'true' }],
        },
      },
    });
    expect(spec.jobs.a!.container!.auth).toEqual({ tokenSecret: 'ci:token' });
  });

  it('refuses a literal token in a run file with a problem naming the field, not the value', () => {
    const res = parseRunSpec({
      jobs: {
        a: {
          runsOn: ['x'],
          container: { image: 'i', auth: { tokenValue: 'hunter2-literal' } },
          steps: [{ run: 'true' }],
        },
      },
    });
    expect(res.ok).toBe(false);
    const problems = (res as { problems: string[] }).problems.join('\n');
    expect(problems).toContain('jobs.a.container.auth.tokenValue');
    expect(problems).toContain('tokenSecret');
    expect(problems).not.toContain('hunter2-literal');
  });
});

describe('resolveImageAuth', () => {
  it('reads the secrets now, defaults the user name and the registry', async () => {
    expect(await resolveImageAuth({ tokenSecret: 'ci:token' }, 'ghcr.io/o/i:1', env())).toEqual({
      username: DEFAULT_REGISTRY_USERNAME,
      password: 'tok-123',
      serveraddress: 'ghcr.io',
    });
    expect(
      await resolveImageAuth(
        { tokenSecret: 'ci:token', usernameSecret: 'ci:user', registry: 'reg.example:443' },
        'alpine',
        env(),
      ),
    ).toEqual({ username: 'robot', password: 'tok-123', serveraddress: 'reg.example:443' });
    expect(
      (await resolveImageAuth({ tokenSecret: 'ci:token', usernameValue: 'me' }, 'alpine', env())).username,
    ).toBe('me');
  });

  it('says what to fix, naming the reference and never a value', async () => {
    const fail = (spec: Parameters<typeof resolveImageAuth>[0], e: NodeJS.ProcessEnv) =>
      resolveImageAuth(spec, 'ghcr.io/o/i:1', e).then(
        () => {
          throw new Error('resolved');
        },
        (err: unknown) => err as ImageAuthError,
      );
    const noStore = await fail({ tokenSecret: 'ci:token' }, {});
    expect(noStore).toBeInstanceOf(ImageAuthError);
    expect(noStore.message).toMatch(/secret ci:token.*set KICI_SECRETS_DIR/);
    const missing = await fail({ tokenSecret: 'ci:absent' }, env());
    expect(missing.message).toContain(`write it to ${join(dir, 'ci', 'absent')}`);
    expect(missing.message).toContain('ghcr.io/o/i:1');
    const empty = await fail({ tokenSecret: 'ci:empty' }, env());
    expect(empty.message).toMatch(/is empty/);
    const badUser = await fail({ tokenSecret: 'ci:token', usernameSecret: 'ci:nobody' }, env());
    expect(badUser.message).toContain('ci:nobody');
    expect(badUser.message).not.toContain('tok-123');
  });
});
