/**
 * Bridge address checks with the real `ip`: what address a link shows, and a port with the lowest
 * unicast MAC there is, which a bridge whose address was never set would take over.
 */

/** Runs `ip` with these arguments (in whatever namespace the caller chose). */
export type IpRunner = (...args: string[]) => Promise<{ stdout: string }>;

export const LOW_MAC = '00:00:00:00:00:01';

/** The MAC address `ip` shows for a link. */
export async function macOf(ip: IpRunner, dev: string): Promise<string> {
  return (JSON.parse((await ip('-j', 'link', 'show', 'dev', dev)).stdout) as { address: string }[])[0]!
    .address;
}

/** A veth port with LOW_MAC on `bridge`, up. Deleting `port` takes its peer with it. */
export async function joinLowPort(ip: IpRunner, bridge: string, port: string): Promise<void> {
  await ip('link', 'add', port, 'address', LOW_MAC, 'type', 'veth', 'peer', 'name', `${port}p`);
  await ip('link', 'set', port, 'master', bridge);
  await ip('link', 'set', port, 'up');
}
