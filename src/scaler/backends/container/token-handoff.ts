/**
 * How an agent container gets its token without it ever being in the container's environment
 * (which `docker inspect` and /proc/1/environ show to anyone, a job's steps included): the token is
 * copied into the created container as a file before it starts, and the agent reads and removes
 * it at start-up, before it runs any step.
 */
import { Readable } from 'node:stream';
import type Docker from 'dockerode';

/** Where the file lands; /tmp exists in every image we run, whatever its user. */
export const HANDOFF_DIR = '/tmp/.kici-handoff';
export const TOKEN_FILE = `${HANDOFF_DIR}/agent-token`;

/**
 * One tar entry header (ustar). The dir is writable by any user so an image's non-root user can
 * remove the file once read; the window is only the agent's own start-up.
 */
function header(name: string, mode: number, size: number, type: '0' | '5'): Buffer {
  const h = Buffer.alloc(512, 0);
  const put = (text: string, at: number, len: number) => h.write(text.slice(0, len), at, len, 'ascii');
  const octal = (n: number, len: number) => n.toString(8).padStart(len - 1, '0') + '\0';
  put(name, 0, 100);
  put(octal(mode, 8), 100, 8);
  put(octal(0, 8), 108, 8);
  put(octal(0, 8), 116, 8);
  put(octal(size, 12), 124, 12);
  put(octal(Math.floor(Date.now() / 1000), 12), 136, 12);
  put('        ', 148, 8); // the checksum counts its own field as spaces
  put(type, 156, 1);
  put('ustar\0', 257, 6);
  put('00', 263, 2);
  let sum = 0;
  for (const b of h) sum += b;
  put(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8);
  return h;
}

/** The archive `putArchive` extracts at `/tmp`: the handoff dir and the token file in it. */
export function tokenArchive(token: string): Buffer {
  const body = Buffer.from(`${token}\n`);
  const dir = HANDOFF_DIR.slice('/tmp/'.length);
  const pad = Buffer.alloc((512 - (body.length % 512)) % 512, 0);
  return Buffer.concat([
    header(`${dir}/`, 0o777, 0, '5'),
    header(`${dir}/agent-token`, 0o644, body.length, '0'),
    body,
    pad,
    Buffer.alloc(1024, 0),
  ]);
}

/** Copy the token into a created (not yet started) container. */
export async function handTokenOver(container: Docker.Container, token: string): Promise<void> {
  await container.putArchive(Readable.from([tokenArchive(token)]), { path: '/tmp' });
}
