/**
 * No silent catches: when the bare-metal backend cannot remove an agent's cgroup after a failed
 * start, that is logged with the agent id and counted under its site (it used to vanish in an empty
 * `.catch`). The cgroup driver is the injected host-tool slot; nothing is launched because creating
 * the group already fails.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { scalerFileSchema } from '../../../src/config/index.js';
import { BareMetalScalerBackend } from '../../../src/scaler/backends/bare-metal/backend.js';
import type { CgroupDriver } from '../../../src/scaler/backends/deps.js';
import { swallowedCounts } from '../../../src/util/swallowed-errors.js';
import { spawnContext } from '../../helpers/spawn-context.js';

const SITE = 'scaler.bare-metal.cgroup-remove';

describe('bare-metal cgroup cleanup', () => {
  it('a cgroup that cannot be removed after a failed start is logged and counted', async () => {
    const records: { msg: string; site?: string; agentId?: string; err?: string }[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => void records.push(JSON.parse(l)) });
    const entry = scalerFileSchema.parse({
      version: 1,
      scalers: [
        {
          name: 'bm',
          type: 'bare-metal',
          maxAgents: 2,
          enforceCgroups: true,
          labelSets: [{ labels: ['linux'], binaryPath: '/bin/true', trust: 'host' }],
        },
      ],
    }).scalers[0]!;
    const cgroups: CgroupDriver = {
      version: 2,
      create: () => Promise.reject(new Error('EACCES: permission denied, mkdir /sys/fs/cgroup/kici')),
      remove: () => Promise.reject(new Error('EBUSY: resource busy, rmdir /sys/fs/cgroup/kici/a1')),
    };
    const backend = new BareMetalScalerBackend({ entry, logger, baseDir: '/', cgroups });
    const before = swallowedCounts().get(SITE) ?? 0;
    await expect(
      backend.spawn(spawnContext('scaler-bare-metal-a1', ['linux'], { limits: { cpus: 1, memBytes: 0 } })),
    ).rejects.toThrow(/cannot create the agent's cgroup/);
    expect((swallowedCounts().get(SITE) ?? 0) - before).toBe(1);
    expect(records.filter((r) => r.site === SITE)).toEqual([
      expect.objectContaining({
        agentId: 'scaler-bare-metal-a1',
        err: 'EBUSY: resource busy, rmdir /sys/fs/cgroup/kici/a1',
      }),
    ]);
    expect(backend.getActiveCount()).toBe(0);
  });
});
