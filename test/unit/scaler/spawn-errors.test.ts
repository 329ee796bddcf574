import { spawn } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SpawnTimeoutError } from '../../../src/scaler/core/deadline.js';
import {
  classifySpawnError,
  DeterministicSpawnError,
  SpawnError,
} from '../../../src/scaler/core/spawn-errors.js';

/** The error a real spawn() of `file` reports. */
function spawnError(file: string): Promise<Error> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, [], { stdio: 'ignore' });
    child.on('error', resolve);
    child.on('exit', () => reject(new Error(`${file} unexpectedly started`)));
  });
}

describe('classifySpawnError', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kici-spawn-errors-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('maps a missing executable (real ENOENT from spawn) to binary-missing', async () => {
    const c = classifySpawnError(await spawnError(join(dir, 'no-such-agent')));
    expect(c).toEqual({
      kind: 'binary-missing',
      message: `agent executable not found: ${join(dir, 'no-such-agent')}`,
      deterministic: true,
    });
  });

  it('maps a file without the exec bit (real EACCES) to not-executable', async () => {
    const file = join(dir, 'agent.sh');
    await writeFile(file, '#!/bin/sh\nexit 0\n');
    await chmod(file, 0o644);
    const c = classifySpawnError(await spawnError(file));
    expect(c.kind).toBe('not-executable');
    expect(c.deterministic).toBe(true);
  });

  it('maps a missing engine socket (real connect ENOENT) to engine-unavailable', async () => {
    const sock = join(dir, 'docker.sock');
    const err = await new Promise<Error>((resolve) => connect(sock).on('error', resolve));
    const c = classifySpawnError(err);
    expect(c).toEqual({
      kind: 'engine-unavailable',
      message: `container engine unreachable (nothing listening at ${sock})`,
      deterministic: false,
    });
  });

  it('recognises a spawn timeout, also when wrapped as an abort cause', () => {
    const timeout = new SpawnTimeoutError(5_000);
    expect(classifySpawnError(timeout)).toEqual({
      kind: 'spawn-timeout',
      message: 'scaler spawn timed out after 5000ms',
      deterministic: false,
    });
    const abort = new Error('The operation was aborted', { cause: timeout });
    abort.name = 'AbortError';
    expect(classifySpawnError(abort).kind).toBe('spawn-timeout');
  });

  it('keeps the classification of a SpawnError', () => {
    const det = new DeterministicSpawnError('config', 'batch path contains &');
    expect(det).toBeInstanceOf(SpawnError);
    expect(det.retryable).toBe(false);
    expect(classifySpawnError(det)).toEqual({
      kind: 'config',
      message: 'batch path contains &',
      deterministic: true,
    });
    const transient = new SpawnError('capacity', 'no free vcpus');
    expect(transient).toMatchObject({ retryable: true, deterministic: false });
  });

  it('classifies image pulls, host exhaustion, engine 5xx and the rest', () => {
    const pull = Object.assign(new Error('(HTTP code 404) no such image - no such image: x:latest'), {
      statusCode: 404,
    });
    expect(classifySpawnError(pull).kind).toBe('image-pull');
    expect(classifySpawnError(Object.assign(new Error('spawn EAGAIN'), { code: 'EAGAIN' })).kind).toBe(
      'capacity',
    );
    expect(classifySpawnError(Object.assign(new Error('boom'), { statusCode: 503 })).kind).toBe('transient');
    expect(classifySpawnError(Object.assign(new Error('reset'), { code: 'ECONNRESET' })).kind).toBe(
      'transient',
    );
    expect(classifySpawnError('weird')).toEqual({ kind: 'unknown', message: 'weird', deterministic: false });
  });

  it('keeps messages on one short line', () => {
    const c = classifySpawnError(new Error(`line one\nline two ${'x'.repeat(1_000)}`));
    expect(c.message).not.toContain('\n');
    expect(c.message.length).toBeLessThanOrEqual(300);
  });
});
