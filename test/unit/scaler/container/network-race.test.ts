/**
 * Two orchestrators creating the agents' network at once: the one that loses the race is told so
 * by the engine (409 for the name, or 403 "Pool overlaps" when the subnet was taken first) and must
 * use the network the other created; a conflict with someone else's network still fails.
 */
import type Docker from 'dockerode';
import { describe, expect, it } from 'vitest';
import {
  ensureIsolatedNetwork,
  ISOLATED_NETWORK_NAME,
} from '../../../../src/scaler/backends/container/network.js';

function engine(createStatus: number, existsAfter: boolean) {
  let created = false;
  return {
    listNetworks: async () => (created && existsAfter ? [{ Name: ISOLATED_NETWORK_NAME, Id: 'net-1' }] : []),
    createNetwork: async () => {
      created = true;
      throw Object.assign(new Error('(HTTP code 403) Pool overlaps with other one on this address space'), {
        statusCode: createStatus,
      });
    },
    getNetwork: (id: string) => ({
      inspect: async () => ({ Id: id, Options: { 'com.docker.network.bridge.name': 'br-kici' } }),
    }),
  } as unknown as Docker;
}

describe('the agents network created by two at once', () => {
  for (const status of [403, 409])
    it(`uses the other creator's network after a ${status}`, async () => {
      expect(await ensureIsolatedNetwork(engine(status, true))).toEqual({ id: 'net-1', bridge: 'br-kici' });
    });

  it('fails with the engine’s answer when the subnet is taken by a network not ours', async () => {
    await expect(ensureIsolatedNetwork(engine(403, false))).rejects.toThrow(/Pool overlaps/);
  });
});
