import { describe, expect, it } from 'vitest';
import { isAddressOrCidr, isExtraHostEntry, parseHostAccessEntry } from '../../../src/config/index.js';

describe('isAddressOrCidr', () => {
  it.each(['10.0.0.0/8', '192.168.1.5', '0.0.0.0/0', 'fd00::/8', '::1', '2001:db8::1/128'])(
    'accepts %s',
    (v) => expect(isAddressOrCidr(v)).toBe(true),
  );
  it.each(['10.0.0.0/33', 'example.com', '10.0.0/8', '', '10.0.0.1/', 'fd00::/129', '1.2.3.4/x'])(
    'rejects %j',
    (v) => expect(isAddressOrCidr(v)).toBe(false),
  );
});

describe('parseHostAccessEntry', () => {
  it.each([
    ['53', { address: '*', port: 53 }],
    ['*', { address: '*', port: '*' }],
    ['*:8080', { address: '*', port: 8080 }],
    ['10.0.0.1:53', { address: '10.0.0.1', port: 53 }],
    ['10.0.0.0/24:*', { address: '10.0.0.0/24', port: '*' }],
    ['10.0.0.1', { address: '10.0.0.1', port: '*' }],
    ['fd00::1', { address: 'fd00::1', port: '*' }],
    ['[fd00::1]:443', { address: 'fd00::1', port: 443 }],
    ['[fd00::/8]', { address: 'fd00::/8', port: '*' }],
  ])('%s', (entry, parsed) => expect(parseHostAccessEntry(entry)).toEqual(parsed));

  it.each([
    '',
    'localhost',
    'localhost:80',
    '10.0.0.1:0',
    '10.0.0.1:65536',
    '*:http',
    '[10.0.0.1]:80',
    '0',
    '1.2.3.4:5:6',
  ])('rejects %j', (entry) => expect(parseHostAccessEntry(entry)).toBeUndefined());
});

describe('isExtraHostEntry', () => {
  it.each(['registry.local:host-gateway', 'db:10.0.0.5', 'v6host:fd00::1'])('accepts %s', (v) =>
    expect(isExtraHostEntry(v)).toBe(true),
  );
  it.each(['nope', ':1.2.3.4', 'host:', 'host:not-an-ip', 'bad_host!:1.2.3.4'])('rejects %j', (v) =>
    expect(isExtraHostEntry(v)).toBe(false),
  );
});
