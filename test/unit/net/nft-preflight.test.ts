/**
 * With isolation on, a host without nft must stop start-up with the remedy; with it off, the
 * operator is told once per scaler what that means.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { IsolationError } from '../../../src/net/isolation.js';
import { nftRequiredTool, probeNft, warnIsolationOff } from '../../../src/net/nft-preflight.js';
import { createNftRunner, NftError } from '../../../src/net/nft-runner.js';
import { NftAgentIsolation } from '../../../src/net/nft-isolation.js';
import { fatalToolError, preflightTools } from '../../../src/scaler/preflight.js';
import { resolveTool, toolSearchDirs } from '../../../src/util/system-tools.js';
import { tempDir } from '../../helpers/temp-dirs.js';

describe('nft preflight', () => {
  it('nft missing from PATH is a fatal problem whose message names the scaler, nft and the remedy', async () => {
    const empty = await tempDir('kici-nopath-');
    const problems = await preflightTools({ name: 'ctr' }, [nftRequiredTool()], {
      PATH: empty,
      KICI_SBIN_DIRS: '',
    });
    expect(problems).toHaveLength(1);
    const err = fatalToolError(problems);
    expect(err?.message).toMatch(/scaler "ctr": nft \(network isolation\): nft was not found on PATH/);
    expect(err?.message).toMatch(/apt-get install .*nftables.*CAP_NET_ADMIN.*networkIsolation: false/);
  });

  it('nft in an sbin directory is found even when PATH leaves it out', async () => {
    const empty = await tempDir('kici-nopath-');
    const sbin = await mkdtemp(join(tmpdir(), 'kici-sbin-'));
    await writeFile(join(sbin, 'nft'), '#!/bin/sh\n', { mode: 0o755 });
    const env = { PATH: empty, KICI_SBIN_DIRS: sbin };
    expect(await preflightTools({ name: 'ctr' }, [nftRequiredTool()], env)).toEqual([]);
    expect(resolveTool('nft', env)).toBe(join(sbin, 'nft'));
    // PATH first, then the sbin directories it lacks; by default /usr/local/sbin, /usr/sbin, /sbin.
    expect(toolSearchDirs({ PATH: '/usr/bin:/sbin' })).toEqual([
      '/usr/bin',
      '/sbin',
      '/usr/local/sbin',
      '/usr/sbin',
    ]);
    await rm(empty, { recursive: true, force: true });
    await rm(sbin, { recursive: true, force: true });
  });

  it('the probe turns an unstartable nft into an IsolationError with the remedy', async () => {
    const runner = createNftRunner({ command: '/nonexistent/kici/nft' });
    const raw = await runner.list(['tables']).catch((e: unknown) => e);
    expect(raw).toBeInstanceOf(NftError);
    expect((raw as NftError).code).toBe('ENOENT');
    const err = await probeNft(runner, 'ctr').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IsolationError);
    expect((err as IsolationError).remedy).toMatch(/nftables/);
    expect((err as Error).message).toContain('scaler "ctr"');
  });

  it('networkIsolation false warns once per scaler, not again on a reload', () => {
    const lines: string[] = [];
    const log = pino(
      { level: 'warn' },
      { write: (s: string) => void lines.push(JSON.parse(s).msg as string) },
    );
    expect(warnIsolationOff(log, 'a')).toBe(true);
    expect(warnIsolationOff(log, 'a')).toBe(false);
    expect(warnIsolationOff(log, 'b')).toBe(true);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/scaler "a": networkIsolation is false: its agents reach every network/);
  });
});

describe('NftAgentIsolation.prepare', () => {
  it('fails with the fix in its message when nft cannot run (start-up shows only the message)', async () => {
    const iso = new NftAgentIsolation({ runner: createNftRunner({ command: '/nonexistent/kici/nft' }) });
    const err = await iso.prepare().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IsolationError);
    expect((err as Error).message).toMatch(/could not set up the agent firewall \(table inet kici_agents\)/);
    expect((err as Error).message).toMatch(/Fix: install nftables .*networkIsolation: false/);
  });
});

describe('NftAgentIsolation.apply', () => {
  it('refuses an orchestrator host name (nft would resolve it once) before running nft', async () => {
    const iso = new NftAgentIsolation({ runner: createNftRunner({ command: '/nonexistent/kici/nft' }) });
    const err = await iso
      .apply({
        agentId: 'a1',
        scalerName: 'ctr',
        ip: '172.30.0.9',
        orchestrator: { address: 'orchestrator.local', port: 8080 },
        hostAccess: [],
        policy: undefined,
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IsolationError);
    expect((err as IsolationError).message).toMatch(/"orchestrator.local" .* not an IPv4 address/);
    expect((err as IsolationError).remedy).toMatch(/orchestratorUrl/);
    expect((err as IsolationError).kind).toBe('config');
  });
});
