/**
 * Address grammar for network policies, checked at load so a typo fails with the file
 * name instead of as an nft error at spawn time.
 */
import { isIP } from 'node:net';

export interface HostAccessEntry {
  /** An IPv4/IPv6 address or CIDR, or '*' for any address of the host. */
  address: string;
  /** A port, or '*' for every port. TCP and UDP are both admitted. */
  port: number | '*';
}

/** An IP address or CIDR (`10.0.0.0/8`, `fd00::/8`, `192.168.1.5`). Host names are refused. */
export function isAddressOrCidr(value: string): boolean {
  const slash = value.indexOf('/');
  if (slash === -1) return isIP(value) !== 0;
  const family = isIP(value.slice(0, slash));
  const prefix = value.slice(slash + 1);
  if (family === 0 || !/^\d{1,3}$/.test(prefix)) return false;
  return Number(prefix) <= (family === 4 ? 32 : 128);
}

function parsePort(text: string): number | '*' | undefined {
  if (text === '*') return '*';
  if (!/^\d{1,5}$/.test(text)) return undefined;
  const port = Number(text);
  return port >= 1 && port <= 65535 ? port : undefined;
}

/**
 * Parse one `hostAccess` entry: `<cidr | address | *>[:<port | *>]`, or a bare port
 * (any host address). IPv6 with a port is written in brackets: `[fd00::1]:8080`.
 * Returns undefined when the entry does not parse.
 */
export function parseHostAccessEntry(entry: string): HostAccessEntry | undefined {
  const text = entry.trim();
  if (text === '') return undefined;
  const bare = parsePort(text);
  if (bare !== undefined && bare !== '*') return { address: '*', port: bare };
  if (text === '*') return { address: '*', port: '*' };

  const bracketed = /^\[([^\]]+)\](?::(.+))?$/.exec(text);
  if (bracketed) {
    const port = bracketed[2] === undefined ? '*' : parsePort(bracketed[2]);
    const address = bracketed[1]!;
    return port !== undefined && isAddressOrCidr(address) && isIP(address.split('/')[0]!) === 6
      ? { address, port }
      : undefined;
  }
  // A bare IPv6 address has several colons; it cannot also carry a port without brackets.
  if (isAddressOrCidr(text)) return { address: text, port: '*' };
  const colon = text.lastIndexOf(':');
  if (colon === -1) return undefined;
  const address = text.slice(0, colon);
  const port = parsePort(text.slice(colon + 1));
  if (port === undefined) return undefined;
  if (address === '*') return { address, port };
  return isAddressOrCidr(address) && isIP(address.split('/')[0]!) === 4 ? { address, port } : undefined;
}

/** `host:address` as used by extraHosts; the address may be `host-gateway`. */
export function isExtraHostEntry(entry: string): boolean {
  const colon = entry.indexOf(':');
  if (colon <= 0) return false;
  const host = entry.slice(0, colon);
  const address = entry.slice(colon + 1);
  if (!/^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$/.test(host)) return false;
  return address === 'host-gateway' || isIP(address) !== 0;
}

/** Dotted-quad IPv4 to a 32-bit unsigned number; undefined when not IPv4. */
export function ipv4ToNumber(value: string): number | undefined {
  if (typeof value !== 'string' || isIP(value) !== 4) return undefined;
  return value.split('.').reduce((acc, part) => acc * 256 + Number(part), 0);
}

export function prefixToMask(prefix: number): number {
  return prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
}

/** An IPv4 CIDR split into network number and prefix length; undefined when malformed. */
export function parseIpv4Cidr(value: string): { network: number; prefix: number } | undefined {
  const match = /^([\d.]+)\/(\d{1,2})$/.exec(value);
  if (!match) return undefined;
  const address = ipv4ToNumber(match[1]!);
  const prefix = Number(match[2]);
  if (address === undefined || prefix > 32) return undefined;
  return { network: (address & prefixToMask(prefix)) >>> 0, prefix };
}
