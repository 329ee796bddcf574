/**
 * The shared agent-container HostConfig: limits from EffectiveLimits, the fixed PidsLimit, only the
 * capabilities that read another process's memory dropped, AutoRemove off, binds and extra hosts, and the engine socket only on request.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  AGENT_CONTAINER_PIDS_LIMIT,
  buildAgentHostConfig,
} from '../../../../src/scaler/backends/container/host-config.js';

describe('buildAgentHostConfig', () => {
  it('sets the fixed pids limit and leaves removal to the scaler', () => {
    expect(AGENT_CONTAINER_PIDS_LIMIT).toBe(4096);
    expect(buildAgentHostConfig({})).toEqual({
      AutoRemove: false,
      PidsLimit: 4096,
      CapDrop: ['SYS_PTRACE', 'SYS_ADMIN', 'SYS_RAWIO', 'SYS_MODULE'],
    });
  });

  it('turns limits into Memory bytes and NanoCpus', () => {
    const hc = buildAgentHostConfig({ limits: { cpus: 1.5, memBytes: 512 * 1024 * 1024 } });
    expect(hc.Memory).toBe(536870912);
    expect(hc.NanoCpus).toBe(1_500_000_000);
  });

  it('sets no limit for zero fields', () => {
    const hc = buildAgentHostConfig({ limits: { cpus: 0, memBytes: 0 } });
    expect(hc).not.toHaveProperty('Memory');
    expect(hc).not.toHaveProperty('NanoCpus');
  });

  it('passes volumes and extra hosts through, and mounts the socket at its own path only when asked', () => {
    const base = {
      volumes: ['/cache:/cache:ro'],
      extraHosts: ['reg.local:host-gateway'],
      engineSocket: '/s/d.sock',
    };
    expect(buildAgentHostConfig(base).Binds).toEqual(['/cache:/cache:ro']);
    expect(buildAgentHostConfig({ ...base, containerSocket: false }).Binds).toEqual(['/cache:/cache:ro']);
    const withSock = buildAgentHostConfig({ ...base, containerSocket: true });
    expect(withSock.Binds).toEqual(['/cache:/cache:ro', '/s/d.sock:/s/d.sock']);
    expect(withSock.ExtraHosts).toEqual(['reg.local:host-gateway']);
    // Without a known local socket (remote engine) there is nothing to mount.
    expect(buildAgentHostConfig({ containerSocket: true })).not.toHaveProperty('Binds');
  });

  it('never drops capabilities, sets no-new-privileges or auto-removes, whatever the input', () => {
    const input = fc.record({
      limits: fc.option(
        fc.record({ cpus: fc.double({ min: 0, max: 256, noNaN: true }), memBytes: fc.nat() }),
        {
          nil: undefined,
        },
      ),
      volumes: fc.option(fc.array(fc.constantFrom('/a:/a', '/b:/b:ro')), { nil: undefined }),
      extraHosts: fc.option(fc.array(fc.constantFrom('x:1.2.3.4', 'y:host-gateway')), { nil: undefined }),
      containerSocket: fc.boolean(),
      engineSocket: fc.option(fc.constantFrom('/var/run/docker.sock', '/run/podman/podman.sock'), {
        nil: undefined,
      }),
    });
    fc.assert(
      fc.property(input, (i) => {
        const hc = buildAgentHostConfig(i);
        expect(hc.PidsLimit).toBe(AGENT_CONTAINER_PIDS_LIMIT);
        expect(hc.AutoRemove).toBe(false);
        // Steps (root, like their agent) must never read the agent's memory.
        expect(hc.CapDrop).toEqual(expect.arrayContaining(['SYS_PTRACE', 'SYS_ADMIN']));
        expect(hc.SecurityOpt).toBeUndefined();
        expect(hc.Privileged).toBeUndefined();
        const sockMounted = (hc.Binds ?? []).some(
          (b) => i.engineSocket && b === `${i.engineSocket}:${i.engineSocket}`,
        );
        expect(sockMounted).toBe(i.containerSocket && i.engineSocket !== undefined);
        if ((i.limits?.memBytes ?? 0) > 0) expect(hc.Memory).toBe(i.limits!.memBytes);
        else expect(hc.Memory).toBeUndefined();
        if ((i.limits?.cpus ?? 0) > 0) expect(hc.NanoCpus).toBe(Math.round(i.limits!.cpus * 1e9));
        else expect(hc.NanoCpus).toBeUndefined();
        for (const v of i.volumes ?? []) expect(hc.Binds).toContain(v);
      }),
    );
  });
});
