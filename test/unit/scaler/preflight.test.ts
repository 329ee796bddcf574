/**
 * Preflight: a backend's required host tools are checked before it is built. A missing fatal tool
 * stops start-up (UserError naming scaler, tool and fix); that includes a missing bare-metal agent
 * binary. A binary that vanishes later still fails each spawn with a classified reason.
 */
import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { ScalerEntry } from '../../../src/config/index.js';
import type { BackendDescriptor } from '../../../src/scaler/backends/descriptor.js';
import {
  buildBackend,
  createScalerBackend,
  descriptorFor,
  UnsupportedBackendError,
} from '../../../src/scaler/backends/registry.js';
import { preflightTools } from '../../../src/scaler/preflight.js';
import { systemClock } from '../../../src/util/clock.js';
import { UserError } from '../../../src/util/errors.js';
import { RecordingBackend } from '../../helpers/recording-backend.js';
import { bareMetal, scalerConfig } from '../../helpers/scaler-config.js';
import { tempDir } from '../../helpers/temp-dirs.js';

const entryOf = (input: Record<string, unknown>): ScalerEntry =>
  scalerConfig({ version: 1, scalers: [input] }).scalers[0]!;

function deps(logged: string[] = []) {
  return {
    logger: pino({ level: 'warn' }, { write: (s: string) => void logged.push(JSON.parse(s).msg as string) }),
    clock: systemClock,
    store: {} as never,
    configPath: '/etc/kici/scalers.yaml',
  };
}

/** A backend type that needs `tool` on PATH, built as a RecordingBackend. */
const needs = (tool: string): BackendDescriptor => ({
  type: 'bare-metal',
  requiredTools: () => [
    {
      name: 'container runtime',
      find: { kind: 'command', command: tool },
      fix: `install ${tool}`,
      severity: 'fatal',
    },
  ],
  create: (entry) => Promise.resolve(new RecordingBackend(entry)),
});

describe('preflight', () => {
  it('finds a command on PATH and reports a missing one, a missing path and a directory, with their fixes', async () => {
    const dir = await tempDir('kici-preflight-');
    const problems = await preflightTools({ name: 'x' }, [
      { name: 'shell', find: { kind: 'command', command: 'sh' }, fix: 'install sh', severity: 'fatal' },
      {
        name: 'nft',
        find: { kind: 'command', command: 'kici-no-such-tool' },
        fix: 'apt install nftables',
        severity: 'fatal',
      },
      {
        name: 'vmm',
        find: { kind: 'path', path: join(dir, 'firecracker') },
        fix: 'install firecracker',
        severity: 'fatal',
      },
      {
        name: 'agent',
        find: { kind: 'path', path: dir },
        fix: 'point binaryPath at a file',
        severity: 'spawn',
      },
    ]);
    expect(problems).toEqual([
      {
        scaler: 'x',
        tool: 'nft',
        problem: 'kici-no-such-tool was not found on PATH',
        fix: 'apt install nftables',
        severity: 'fatal',
      },
      {
        scaler: 'x',
        tool: 'vmm',
        problem: `${join(dir, 'firecracker')} does not exist`,
        fix: 'install firecracker',
        severity: 'fatal',
      },
      {
        scaler: 'x',
        tool: 'agent',
        problem: `${dir} is a directory, not an executable file`,
        fix: 'point binaryPath at a file',
        severity: 'spawn',
      },
    ]);
  });

  it('a missing fatal tool stops the build with a UserError naming the scaler, the tool and the fix', async () => {
    const entry = entryOf(bareMetal('ci', [['linux']]));
    const err = await buildBackend(needs('kici-no-such-runtime'), entry, deps()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UserError);
    expect((err as UserError).problems).toEqual([
      'scaler "ci": container runtime: kici-no-such-runtime was not found on PATH. Fix: install kici-no-such-runtime',
    ]);
    await expect(buildBackend(needs('sh'), entry, deps())).resolves.toBeInstanceOf(RecordingBackend);
  });

  it('a missing agent binary stops start-up: the error names the scaler, the path and the fix', async () => {
    const entry = entryOf(bareMetal('bm', [{ labels: ['linux'], binaryPath: '/nonexistent/kici-agent' }]));
    const err = await createScalerBackend(entry, deps()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UserError);
    expect((err as UserError).problems).toContainEqual(
      expect.stringMatching(
        /^scaler "bm": agent binary of label set \[linux\]: \/nonexistent\/kici-agent does not exist\. Fix: install kici-agent/,
      ),
    );
  });

  it('an executable agent binary passes and the bare-metal backend is built with its capabilities', async () => {
    const entry = entryOf(bareMetal('bm', [{ labels: ['linux'], binaryPath: '/bin/true' }]));
    const backend = await createScalerBackend(entry, deps());
    expect(backend.type).toBe('bare-metal');
    expect(backend.capabilities).toEqual({
      localCompute: true,
      lifetime: 'orchestrator',
      cleansOrphans: true,
      capturesLogs: true,
      peerAdoptable: false,
      provisionalLaunch: true,
    });
    expect(backend.getRequiredTools(entry).every((t) => t.severity === 'fatal')).toBe(true);
  });

  it('a type without a descriptor gives the "not available in this build yet" error', () => {
    // Every type of the seed has a descriptor in this build; an unknown one (a newer config read by
    // an older build) still gets the clear error.
    for (const type of ['container', 'bare-metal', 'event', 'firecracker'] as const) {
      expect(descriptorFor({ name: 'x', type }).type).toBe(type);
    }
    const unknown = { name: 'c', type: 'lambda' as unknown as 'container' };
    expect(() => descriptorFor(unknown)).toThrow(UnsupportedBackendError);
    expect(() => descriptorFor(unknown)).toThrow(
      'scaler "c": the lambda backend is not available in this build yet',
    );
  });
});
