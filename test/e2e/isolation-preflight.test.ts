/**
 * A container scaler with network isolation on (the default) cannot start on a host without nft:
 * the orchestrator refuses to start, naming the scaler, nft and the fix. With isolation off the
 * same host passes this check (it then fails later only for the missing engine, not for nft).
 */
import { describe, expect, it } from 'vitest';
import { startTestOrchestrator } from '../helpers/orchestrator.js';
import { tempDir } from '../helpers/temp-dirs.js';

function config(networkIsolation: boolean) {
  return {
    version: 1,
    scalers: [
      {
        name: 'ctr',
        type: 'container',
        maxAgents: 1,
        // Nothing listens there: nothing in this test reaches an engine.
        socketPath: '/nonexistent/kici/engine.sock',
        networkIsolation,
        labelSets: [{ labels: ['boxed'], image: 'kici-agent:test', imagePullPolicy: 'Never' }],
      },
    ],
  };
}

describe('isolation preflight', () => {
  it('start-up fails when nft is not on PATH and isolation is on, naming the fix', async () => {
    const empty = await tempDir('kici-no-nft-');
    // Nor in an sbin directory, where a host's nft is found even when PATH lacks it.
    const hostEnv = { PATH: empty, KICI_SBIN_DIRS: '' };
    const err = await startTestOrchestrator({ config: config(true), hostEnv }).then(
      async (t) => {
        await t.stop();
        return undefined;
      },
      (e: unknown) => e as Error,
    );
    expect(err?.message).toMatch(/scaler "ctr": nft \(network isolation\): nft was not found on PATH/);
    expect(err?.message).toMatch(/Fix: install nftables .*CAP_NET_ADMIN.*networkIsolation: false/);
  });

  it('with networkIsolation false nft is not required (start-up fails on the engine instead)', async () => {
    const empty = await tempDir('kici-no-nft-');
    const err = await startTestOrchestrator({ config: config(false), hostEnv: { PATH: empty } }).then(
      async (t) => {
        await t.stop();
        return undefined;
      },
      (e: unknown) => e as Error,
    );
    expect(err?.message).toMatch(/container engine at \/nonexistent\/kici\/engine.sock does not answer/);
    expect(err?.message).not.toMatch(/nft/);
  });
});
