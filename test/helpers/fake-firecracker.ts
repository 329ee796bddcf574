/**
 * A stand-in for the firecracker binary (none can be installed here), serving the API on the
 * `--api-sock` socket like the real one.
 * - Its command line is checked against firecracker's own options: an unknown or repeated option
 *   makes it exit 1 (the real binary refuses both).
 * - Every request is checked against the published API document and refused with 400 when it does
 *   not fit; each one is appended to $FAKE_FC_LOG as a JSON line.
 * - Files named in boot-source and drives must exist, as firecracker opens them at that call; under
 *   the fake jailer (`--fake-jail-root <dir>`, the stand-in for the chroot it cannot make) paths are
 *   inside that root and must be usable by $FAKE_FC_UID:$FAKE_FC_GID, the ids the jailer drops to.
 * - MMDS is kept: PUT replaces it, PATCH merges (RFC 7396), GET returns it.
 * InstanceStart prints a console line; SendCtrlAltDel makes it exit, as a guest that shuts down would.
 */
import { appendFileSync, constants, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { dirname, join } from 'node:path';
import { checkRequest, loadFirecrackerApi } from './firecracker-api-check.ts';

/** firecracker's options (v1.x `--help`): those taking a value, and bare flags. */
const WITH_VALUE = new Set([
  '--api-sock',
  '--id',
  '--config-file',
  '--log-path',
  '--level',
  '--module',
  '--metrics-path',
  '--seccomp-filter',
  '--start-time-us',
  '--start-time-cpu-us',
  '--parent-cpu-time-us',
  '--mmds-size-limit',
  '--http-api-max-payload-size',
  '--metadata',
  '--describe-snapshot',
  '--fake-jail-root', // the fake's only addition: where the jailer put it
]);
const FLAGS = new Set(['--no-api', '--no-seccomp', '--boot-timer', '--show-level', '--show-log-origin']);

function parseArgs(argv: string[]): Map<string, string> {
  const seen = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (seen.has(a)) fail(`argument ${a} provided more than once`);
    if (FLAGS.has(a)) seen.set(a, '');
    else if (WITH_VALUE.has(a) && i + 1 < argv.length) seen.set(a, argv[++i]!);
    else fail(`unexpected argument ${a}`);
  }
  return seen;
}

function fail(message: string): never {
  process.stderr.write(`fake firecracker: ${message}\n`);
  process.exit(1);
}

const args = parseArgs(process.argv.slice(2));
// Look like a firecracker process to the pid-ownership checks: the process name (comm) is taken from
// the title, which node would otherwise leave as "MainThread"; the arguments stay readable in it.
process.title = ['firecracker', ...process.argv.slice(2)].join(' ');
const root = args.get('--fake-jail-root');
const apiSock = args.get('--api-sock') ?? fail('--api-sock is required');
const sock = root ? join(root, apiSock) : apiSock;
const uid = process.env.FAKE_FC_UID === undefined ? undefined : Number(process.env.FAKE_FC_UID);
const gid = process.env.FAKE_FC_GID === undefined ? undefined : Number(process.env.FAKE_FC_GID);
const logFile = process.env.FAKE_FC_LOG;
const doc = loadFirecrackerApi();
const sockDirProblem = root ? fileProblem(dirname(apiSock), true) : undefined;
if (sockDirProblem) fail(`cannot create the API socket: ${sockDirProblem}`);
let started = false;
let mmds: unknown = {};

/** Can the jailed process (uid:gid) open this file as it must? Mode bits, as the kernel checks them. */
function fileProblem(path: string | undefined, write: boolean): string | undefined {
  if (path === undefined) return undefined;
  if (root && !path.startsWith('/')) return `${path}: a jailed firecracker needs paths inside its root`;
  const onHost = root ? join(root, path) : path;
  let st;
  try {
    st = statSync(onHost);
  } catch {
    return `${path}: no such file${root ? ' in the jail' : ''}`;
  }
  if (uid === undefined || uid === 0) return undefined;
  const want = write ? constants.S_IROTH | constants.S_IWOTH : constants.S_IROTH;
  const bits = st.uid === uid ? (st.mode >> 6) & 7 : st.gid === gid ? (st.mode >> 3) & 7 : st.mode & 7;
  return (bits & want) === want
    ? undefined
    : `${path}: not ${write ? 'writable' : 'readable'} by ${uid}:${gid}`;
}

function semantic(path: string, body: Record<string, unknown>): string[] {
  const errors: string[] = [];
  const add = (e: string | undefined) => e && errors.push(e);
  if (path === '/boot-source') {
    add(fileProblem(body.kernel_image_path as string, false));
    add(fileProblem(body.initrd_path as string | undefined, false));
  }
  if (path.startsWith('/drives/')) add(fileProblem(body.path_on_host as string, !body.is_read_only));
  if (path === '/actions') {
    const action = body.action_type;
    if (action === 'InstanceStart' && started) errors.push('the microVM is already running');
    if (action === 'SendCtrlAltDel' && !started) errors.push('the microVM is not running');
  }
  return errors;
}

/** JSON merge patch (RFC 7396), as Firecracker applies PATCH /mmds. */
function merge(target: unknown, patch: unknown): unknown {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> =
    typeof target === 'object' && target !== null && !Array.isArray(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = merge(out[k], v);
  }
  return out;
}

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
    if (!errors.length && body) errors = semantic(req.url!, body as Record<string, unknown>);
    if (logFile)
      appendFileSync(logFile, JSON.stringify({ method: req.method, path: req.url, body, errors }) + '\n');
    if (errors.length) {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ fault_message: errors.join('; ') }));
      return;
    }
    if (req.url === '/mmds') {
      if (req.method === 'GET') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(mmds));
        return;
      }
      mmds = req.method === 'PATCH' ? merge(mmds, body) : (body ?? {});
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
