/**
 * A WebSocket client built by hand on a TCP socket, for sending frames that no library would
 * produce: bad lengths, unmasked frames, reserved opcodes, invalid UTF-8.
 */
import { randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';

export interface FrameSpec {
  payload?: Buffer | string;
  opcode?: number;
  fin?: boolean;
  /** RSV1-3 as the three bits 0b111. */
  rsv?: number;
  /** false sends the frame unmasked, which a server must refuse. */
  mask?: boolean;
  /** Claim this payload length in the header instead of the real one. */
  claimedLength?: number | bigint;
  maskKey?: Buffer;
}

/** One frame, byte by byte: FIN/RSV/opcode, MASK/length (7, 16 or 64 bits), masking key, payload. */
export function frame(spec: FrameSpec): Buffer {
  const payload =
    typeof spec.payload === 'string' ? Buffer.from(spec.payload) : (spec.payload ?? Buffer.alloc(0));
  const masked = spec.mask ?? true;
  const len = BigInt(spec.claimedLength ?? payload.length);
  const b0 = ((spec.fin ?? true) ? 0x80 : 0) | (((spec.rsv ?? 0) & 7) << 4) | ((spec.opcode ?? 1) & 0x0f);
  let header: Buffer;
  if (len < 126n) header = Buffer.from([b0, (masked ? 0x80 : 0) | Number(len)]);
  else if (len < 65536n) {
    header = Buffer.alloc(4);
    header[0] = b0;
    header[1] = (masked ? 0x80 : 0) | 126;
    header.writeUInt16BE(Number(len), 2);
  } else {
    header = Buffer.alloc(10);
    header[0] = b0;
    header[1] = (masked ? 0x80 : 0) | 127;
    header.writeBigUInt64BE(len, 2);
  }
  if (!masked) return Buffer.concat([header, payload]);
  const key = spec.maskKey ?? randomBytes(4);
  const body = Buffer.from(payload);
  for (let i = 0; i < body.length; i++) body[i]! ^= key[i % 4]!;
  return Buffer.concat([header, key, body]);
}

/**
 * The close code a client frame of ours carries (a close frame whose payload starts with one), so a
 * test can tell the server's echo of it from a close the server chose.
 */
export function sentCloseCode(item: Buffer): number | undefined {
  if (item.length < 2 || (item[0]! & 0x0f) !== 0x8) return undefined;
  const masked = (item[1]! & 0x80) !== 0;
  const len = item[1]! & 0x7f;
  const at = masked ? 6 : 2;
  if (len < 2 || len > 125 || item.length < at + 2) return undefined;
  const b = (i: number) => item[at + i]! ^ (masked ? item[2 + i]! : 0);
  return (b(0) << 8) | b(1);
}

export const textFrame = (value: unknown) =>
  frame({ payload: typeof value === 'string' ? value : JSON.stringify(value) });

export interface ServerFrame {
  opcode: number;
  payload: Buffer;
}

export interface RawConn {
  socket: Socket;
  /** The HTTP status of the upgrade answer (101 when accepted). */
  status: number;
  frames: ServerFrame[];
  /** Resolves when the server's close frame arrives or the TCP connection ends. */
  closed: Promise<{ code: number | undefined; reason: string }>;
  send(data: Buffer): void;
  /** Parsed text frames the server sent. */
  messages(): { type: string; [k: string]: unknown }[];
  destroy(): void;
}

/** Connect and upgrade; resolves once the server answered the handshake. */
export function rawConnect(httpUrl: string, path = '/ws', extraHeaders = ''): Promise<RawConn> {
  const { hostname, port } = new URL(httpUrl);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    // A server that never answers the handshake (because it threw) must not hang the test.
    const handshakeTimer = setTimeout(() => socket.destroy(), 5_000);
    let buf: Buffer = Buffer.alloc(0);
    let status = 0;
    const frames: ServerFrame[] = [];
    let settleClosed!: (v: { code: number | undefined; reason: string }) => void;
    const closed = new Promise<{ code: number | undefined; reason: string }>((r) => (settleClosed = r));
    socket.on('error', () => {});
    socket.on('close', () => {
      settleClosed({ code: undefined, reason: '' });
      if (!status) reject(new Error('connection closed before the handshake answer'));
    });
    socket.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (!status) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        status = Number(/^HTTP\/1\.1 (\d+)/.exec(buf.subarray(0, end).toString('latin1'))?.[1] ?? -1);
        buf = buf.subarray(end + 4);
        clearTimeout(handshakeTimer);
        resolve(conn);
      }
      buf = readFrames(buf, frames, (f) => {
        if (f.opcode !== 8) return;
        const code = f.payload.length >= 2 ? f.payload.readUInt16BE(0) : undefined;
        settleClosed({ code, reason: f.payload.subarray(2).toString() });
      });
    });
    const conn: RawConn = {
      socket,
      get status() {
        return status;
      },
      frames,
      closed,
      send(data) {
        if (!socket.destroyed && socket.writable) socket.write(data);
      },
      messages() {
        return frames.filter((f) => f.opcode === 1).map((f) => JSON.parse(f.payload.toString()));
      },
      destroy() {
        socket.destroy();
      },
    };
    const key = randomBytes(16).toString('base64');
    socket.write(
      `GET ${path} HTTP/1.1\r\nHost: ${hostname}:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
        `Sec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n${extraHeaders}\r\n`,
    );
  });
}

/** Take every complete server frame off the front of `buf`; returns what is left. */
function readFrames(buf: Buffer, out: ServerFrame[], onFrame: (f: ServerFrame) => void): Buffer {
  for (;;) {
    if (buf.length < 2) return buf;
    let len = buf[1]! & 0x7f;
    let at = 2;
    if (len === 126) {
      if (buf.length < 4) return buf;
      len = buf.readUInt16BE(2);
      at = 4;
    } else if (len === 127) {
      if (buf.length < 10) return buf;
      len = Number(buf.readBigUInt64BE(2));
      at = 10;
    }
    if (buf.length < at + len) return buf;
    const f = { opcode: buf[0]! & 0x0f, payload: Buffer.from(buf.subarray(at, at + len)) };
    out.push(f);
    onFrame(f);
    buf = buf.subarray(at + len);
  }
}

/** Wait for `p`, or fail after `ms` naming what was awaited. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
    p.then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(timer);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}

/**
 * The session secret each raw agent got, by server and agent id: every rawRegister of one agent id
 * acts as one agent process, so its later registrations prove the session like a reconnect does.
 */
const rawSessions = new Map<string, string>();

/** The session secret rawRegister got for this agent id, for a hand-built reconnect to present. */
export function rawSessionOf(httpUrl: string, agentId: string): string | undefined {
  return rawSessions.get(`${httpUrl}|${agentId}`);
}

/** Upgrade and register with a real token; resolves after register.ack. */
export async function rawRegister(
  httpUrl: string,
  agentId: string,
  token: string,
  labels: string[],
): Promise<RawConn> {
  const conn = await rawConnect(httpUrl);
  if (conn.status !== 101) throw new Error(`upgrade answered ${conn.status}`);
  const key = `${httpUrl}|${agentId}`;
  const session = rawSessions.get(key);
  conn.send(
    textFrame({ type: 'register', protocol: 1, agentId, token, labels, ...(session ? { session } : {}) }),
  );
  const until = Date.now() + 10_000;
  for (;;) {
    const ack = conn.messages().find((m) => m.type === 'register.ack');
    if (ack) {
      if (typeof ack.session === 'string') rawSessions.set(key, ack.session);
      break;
    }
    if (conn.socket.destroyed || Date.now() > until)
      throw new Error(`register of ${agentId} failed: ${JSON.stringify(conn.messages())}`);
    await new Promise((r) => setTimeout(r, 5));
  }
  return conn;
}

/** The first message from the server that matches, waiting up to `ms` for it. */
export async function nextMessage(
  conn: RawConn,
  match: (m: { type: string; [k: string]: unknown }) => boolean,
  ms = 10_000,
): Promise<{ type: string; [k: string]: unknown }> {
  const until = Date.now() + ms;
  for (;;) {
    const found = conn.messages().find(match);
    if (found) return found;
    if (Date.now() > until)
      throw new Error(`no matching message within ${ms} ms: ${JSON.stringify(conn.messages())}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
