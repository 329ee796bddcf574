/**
 * Network namespaces a test builds for itself (root only): a "host" namespace with the agents'
 * bridge and uplinks to an RFC1918 host and a public-ish host, agents hanging off the bridge, and
 * a tiny TCP server in each. Everything is named with the test's own prefix and deleted afterwards.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

export async function ip(...args: string[]): Promise<string> {
  return (await run('ip', args)).stdout;
}

export async function inNs(ns: string, argv: string[]): Promise<string> {
  return (await run('ip', ['netns', 'exec', ns, ...argv])).stdout;
}

/** Can `ns` open a TCP connection to host:port within `ms`? (A dropped SYN just times out.) */
export async function canConnect(ns: string, host: string, port: number, ms = 800): Promise<boolean> {
  const script = `const s=require('net').connect(${port},'${host}');s.setTimeout(${ms},()=>process.exit(2));s.on('connect',()=>process.exit(0));s.on('error',()=>process.exit(1));`;
  try {
    await run('ip', ['netns', 'exec', ns, process.execPath, '-e', script], { timeout: ms + 5000 });
    return true;
  } catch {
    return false;
  }
}

export interface Lab {
  host: string;
  lan: string;
  pub: string;
  agents: string[];
  bridge: string;
  /** Agent namespace → its address on the bridge. */
  agentIp: Map<string, string>;
  destroy(): Promise<void>;
}

/** A TCP server that accepts and closes, listening on every address of `ns` at `ports`. */
export function startServer(ns: string, ports: number[]): ChildProcess {
  // Probes hang up at once; a reset from them must not end the server.
  const script = `for (const p of ${JSON.stringify(ports)}) require('net').createServer(c=>{c.on('error',()=>{});c.end('ok');}).listen(p,'0.0.0.0');`;
  return spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', script], { stdio: 'ignore' });
}

export async function buildLab(prefix: string, agentCount: number, ports: number[]): Promise<Lab> {
  const host = `${prefix}-host`;
  const lan = `${prefix}-lan`;
  const pub = `${prefix}-pub`;
  const agents = Array.from({ length: agentCount }, (_, i) => `${prefix}-a${i}`);
  const all = [host, lan, pub, ...agents];
  const servers: ChildProcess[] = [];
  const bridge = 'br-agents';
  const agentIp = new Map<string, string>();
  const destroy = async () => {
    for (const s of servers) if (s.pid && s.exitCode === null) process.kill(s.pid, 'SIGKILL');
    for (const ns of all) await ip('netns', 'del', ns).catch(() => undefined);
  };
  try {
    for (const ns of all) {
      await ip('netns', 'add', ns);
      await ip('-n', ns, 'link', 'set', 'lo', 'up');
    }
    await inNs(host, ['sysctl', '-qw', 'net.ipv4.ip_forward=1']);
    await ip('-n', host, 'link', 'add', bridge, 'type', 'bridge');
    await ip('-n', host, 'addr', 'add', '172.30.0.1/16', 'dev', bridge);
    await ip('-n', host, 'link', 'set', bridge, 'up');
    const uplink = async (ns: string, hostAddr: string, peerAddr: string, name: string) => {
      await ip('-n', host, 'link', 'add', name, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
      await ip('-n', host, 'addr', 'add', hostAddr, 'dev', name);
      await ip('-n', host, 'link', 'set', name, 'up');
      await ip('-n', ns, 'addr', 'add', peerAddr, 'dev', 'eth0');
      await ip('-n', ns, 'link', 'set', 'eth0', 'up');
      await ip('-n', ns, 'route', 'add', 'default', 'via', hostAddr.split('/')[0]!);
    };
    await uplink(lan, '10.77.0.1/24', '10.77.0.2/24', 'up-lan');
    await uplink(pub, '198.51.100.1/24', '198.51.100.2/24', 'up-pub');
    for (const [i, ns] of agents.entries()) {
      const addr = `172.30.0.${i + 2}`;
      agentIp.set(ns, addr);
      await ip('-n', host, 'link', 'add', `ag${i}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
      await ip('-n', host, 'link', 'set', `ag${i}`, 'master', bridge, 'up');
      await ip('-n', ns, 'addr', 'add', `${addr}/16`, 'dev', 'eth0');
      await ip('-n', ns, 'link', 'set', 'eth0', 'up');
      await ip('-n', ns, 'route', 'add', 'default', 'via', '172.30.0.1');
    }
    for (const ns of [host, lan, pub]) servers.push(startServer(ns, ports));
    return { host, lan, pub, agents, bridge, agentIp, destroy };
  } catch (err) {
    await destroy();
    throw err;
  }
}

/**
 * A namespace hanging off the CURRENT network namespace (the one this process runs in, e.g. an
 * engine's) by a veth: `hostCidr` on our side, `peerCidr` inside, default route back through us,
 * and a TCP server on `ports`. Returns a teardown.
 */
export async function attachedHost(
  ns: string,
  link: string,
  hostCidr: string,
  peerCidr: string,
  ports: number[],
): Promise<() => Promise<void>> {
  let server: ChildProcess | undefined;
  const destroy = async () => {
    if (server?.pid && server.exitCode === null) process.kill(server.pid, 'SIGKILL');
    await ip('link', 'del', link).catch(() => undefined);
    await ip('netns', 'del', ns).catch(() => undefined);
  };
  try {
    await ip('netns', 'add', ns);
    await ip('-n', ns, 'link', 'set', 'lo', 'up');
    await ip('link', 'add', link, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
    await ip('addr', 'add', hostCidr, 'dev', link);
    await ip('link', 'set', link, 'up');
    await ip('-n', ns, 'addr', 'add', peerCidr, 'dev', 'eth0');
    await ip('-n', ns, 'link', 'set', 'eth0', 'up');
    await ip('-n', ns, 'route', 'add', 'default', 'via', hostCidr.split('/')[0]!);
    server = startServer(ns, ports);
    return destroy;
  } catch (err) {
    await destroy();
    throw err;
  }
}
