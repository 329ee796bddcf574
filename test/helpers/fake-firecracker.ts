/**
 * A stand-in for the firecracker binary (none can be installed here): `--api-sock <path> --id <id>`
 * like the real one, serving the API on that socket. Every request is checked against the published
 * API document and refused with 400 when it does not fit; each one is appended to $FAKE_FC_LOG as a
 * JSON line. InstanceStart prints a console line; SendCtrlAltDel makes it exit, as a guest that
 * shuts down would.
 */
import { appendFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { checkRequest, loadFirecrackerApi } from './firecracker-api-check.ts';

const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
};
const sock = arg('--api-sock');
if (!sock) {
  process.stderr.write('fake firecracker: --api-sock is required\n');
  process.exit(2);
}
const logFile = process.env.FAKE_FC_LOG;
const doc = loadFirecrackerApi();
let started = false;

const server = createServer((req, res) => {
  let text = '';
  req.on('data', (d: Buffer) => (text += d.toString()));
  req.on('end', () => {
    let body: unknown;
    let errors: string[] = [];
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      errors = ['body is not JSON'];
    }
    if (!errors.length) errors = checkRequest(doc, req.method!, req.url!, body);
    if (!errors.length && req.url === '/actions') {
      const action = (body as { action_type: string }).action_type;
      if (action === 'InstanceStart' && started) errors = ['the microVM is already running'];
      if (action === 'SendCtrlAltDel' && !started) errors = ['the microVM is not running'];
    }
    if (logFile)
      appendFileSync(logFile, JSON.stringify({ method: req.method, path: req.url, body, errors }) + '\n');
    if (errors.length) {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ fault_message: errors.join('; ') }));
      return;
    }
    res.writeHead(204);
    res.end();
    if (req.url === '/actions') {
      const action = (body as { action_type: string }).action_type;
      if (action === 'InstanceStart') {
        started = true;
        process.stdout.write('[    0.000000] Linux version (fake firecracker console)\n');
      } else if (action === 'SendCtrlAltDel') {
        setTimeout(() => {
          server.close();
          rmSync(sock, { force: true });
          process.exit(0);
        }, 50);
      }
    }
  });
});
rmSync(sock, { force: true });
server.listen(sock);
process.on('SIGTERM', () => {
  rmSync(sock, { force: true });
  process.exit(0);
});
