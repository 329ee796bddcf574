import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { bridgeMac } from '../../../../src/scaler/backends/firecracker/host-net.js';

describe('bridgeMac', () => {
  it('is a locally administered unicast address that spells the gateway, and differs for each gateway', () => {
    fc.assert(
      fc.property(fc.ipV4(), fc.ipV4(), (a, b) => {
        const mac = bridgeMac(a);
        expect(mac).toMatch(/^([0-9a-f]{2}:){5}[0-9a-f]{2}$/);
        const first = parseInt(mac.slice(0, 2), 16);
        expect(first & 0x02).toBe(0x02); // locally administered: never a vendor's
        expect(first & 0x01).toBe(0); // unicast: a bridge cannot use a group address
        const back = mac
          .split(':')
          .slice(2)
          .map((h) => parseInt(h, 16))
          .join('.');
        expect(back).toBe(a);
        expect(bridgeMac(b) === mac).toBe(a === b);
      }),
    );
  });

  it('refuses what is not an IPv4 address, naming it', () => {
    for (const bad of ['10.0.0', '10.0.0.256', 'fd00::1', '10.0.0.1/24', ''])
      expect(() => bridgeMac(bad)).toThrow(`bridge gateway ${bad} is not an IPv4 address`);
  });
});
