/**
 * Run as its own process (Node strips the types): opens N WebSocket connections and sends each one
 * frame that claims SIZE bytes, streaming the payload until the server drops the connection. Kept
 * out of the test process so the test measures the server's memory only. Prints the bytes sent.
 * Usage: node ws-flood-attacker.ts <http-url> <connections> <size>
 */
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';

const [url, n, size] = [process.argv[2]!, Number(process.argv[3]), Number(process.argv[4])];
const { hostname, port } = new URL(url);
// A zero masking key leaves the payload as is, so one chunk serves every write.
const chunk = Buffer.alloc(64 * 1024, 0x61);

function attack(): Promise<number> {
  return new Promise((resolve) => {
    const s = connect(Number(port), hostname);
    let sent = 0;
    let upgraded = false;
    s.on('error', () => {});
    s.on('close', () => resolve(sent));
    s.on('data', (d: Buffer) => {
      if (upgraded || !d.toString('latin1').startsWith('HTTP/1.1 101')) return;
      upgraded = true;
      const header = Buffer.alloc(14);
      header[0] = 0x81;
      header[1] = 0x80 | 127;
      header.writeBigUInt64BE(BigInt(size), 2);
      s.write(header);
      const pump = () => {
        while (sent < size && s.writable) {
          sent += chunk.length;
          if (!s.write(chunk)) return void s.once('drain', pump);
        }
      };
      pump();
    });
    s.write(
      `GET /ws HTTP/1.1\r\nHost: ${hostname}:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
        `Sec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
    );
  });
}

const sent = await Promise.all(Array.from({ length: n }, attack));
process.stdout.write(JSON.stringify({ sent }) + '\n');
