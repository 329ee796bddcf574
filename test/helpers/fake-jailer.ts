/**
 * A stand-in for Firecracker's jailer (none can be installed here). It checks its command line
 * against the jailer's documented CLI, then does what the jailer does before it execs firecracker:
 * makes `<chroot-base-dir>/<exec file name>/<id>/root`, copies the exec file in, and runs it there
 * with `--id` and the start-time flags the jailer adds, then the arguments after `--`.
 *
 * It cannot chroot, join a netns or drop privileges, so it prints a shell command that the wrapper
 * (written by the test) evals: `exec <chroot>/<exec file> ... --fake-jail-root <chroot>`, with
 * FAKE_FC_UID / FAKE_FC_GID exported so the fake firecracker checks file access as that user would.
 * Each accepted command line is appended to $FAKE_JAILER_LOG as a JSON line.
 */
import { appendFileSync, copyFileSync, existsSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';

/** The jailer's options (Firecracker docs/jailer.md): those taking a value, repeatable ones, flags. */
const WITH_VALUE = new Set([
  '--id',
  '--exec-file',
  '--uid',
  '--gid',
  '--parent-cgroup',
  '--cgroup-version',
  '--cgroup',
  '--chroot-base-dir',
  '--netns',
  '--resource-limit',
]);
const REPEATABLE = new Set(['--cgroup', '--resource-limit']);
const FLAGS = new Set(['--daemonize', '--new-pid-ns']);
const REQUIRED = ['--id', '--exec-file', '--uid', '--gid'];
/** What the jailer itself passes to firecracker; repeating them after `--` would make it refuse. */
const JAILER_ADDS = ['--id', '--start-time-us', '--start-time-cpu-us', '--parent-cpu-time-us'];

function fail(message: string): never {
  process.stderr.write(`fake jailer: ${message}\n`);
  process.exit(1);
}

const argv = process.argv.slice(2);
const dash = argv.indexOf('--');
const own = dash >= 0 ? argv.slice(0, dash) : argv;
const extra = dash >= 0 ? argv.slice(dash + 1) : [];
const opts = new Map<string, string>();
for (let i = 0; i < own.length; i++) {
  const a = own[i]!;
  if (FLAGS.has(a)) opts.set(a, '');
  else if (WITH_VALUE.has(a)) {
    if (i + 1 >= own.length) fail(`${a} needs a value`);
    if (opts.has(a) && !REPEATABLE.has(a)) fail(`${a} given more than once`);
    opts.set(a, own[++i]!);
  } else fail(`unknown argument ${a} (firecracker's own arguments go after --)`);
}
for (const r of REQUIRED) if (!opts.has(r)) fail(`${r} is required`);
const id = opts.get('--id')!;
if (!/^[A-Za-z0-9-]{1,64}$/.test(id)) fail(`invalid --id "${id}": letters, digits and hyphens, at most 64`);
const execFile = opts.get('--exec-file')!;
if (!basename(execFile).includes('firecracker'))
  fail('--exec-file must name a file containing "firecracker"');
if (!existsSync(execFile)) fail(`--exec-file ${execFile} does not exist`);
for (const k of ['--uid', '--gid'])
  if (!/^\d+$/.test(opts.get(k)!)) fail(`${k} must be a number, got "${opts.get(k)}"`);
const netns = opts.get('--netns');
if (netns !== undefined && !existsSync(netns)) fail(`--netns ${netns} does not exist`);
for (const a of extra) if (JAILER_ADDS.includes(a)) fail(`${a} after -- : the jailer passes it itself`);

const base = opts.get('--chroot-base-dir') ?? '/srv/jailer';
const chroot = join(base, basename(execFile), id, 'root');
mkdirSync(chroot, { recursive: true });
// The shared guest images every VM boots (hard links into each jail): the jailed uid must not own
// them or be able to write them, or one VMM could change what every later VM boots.
const jailUid = Number(opts.get('--uid'));
const jailGid = Number(opts.get('--gid'));
for (const name of readdirSync(chroot)) {
  const st = statSync(join(chroot, name));
  if (!st.isFile() || (st.nlink < 2 && !['kernel', 'initrd', 'rootfs.ext4'].includes(name))) continue;
  const writable =
    st.uid === jailUid || (st.gid === jailGid && st.mode & 0o020) || st.mode & 0o002 ? true : false;
  if (writable) fail(`shared guest file ${name} in the chroot is writable by the jail's uid ${jailUid}`);
}
const inJail = join(chroot, basename(execFile));
copyFileSync(execFile, inJail);
if (process.env.FAKE_JAILER_LOG) appendFileSync(process.env.FAKE_JAILER_LOG, JSON.stringify(argv) + '\n');

const now = Date.now() * 1000;
const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
const cmd = [
  inJail,
  ...['--id', id, '--start-time-us', String(now), '--start-time-cpu-us', '0', '--parent-cpu-time-us', '0'],
  // With a trailing slash, as paths inside the VM directory appear on a VMM's command line.
  ...['--fake-jail-root', chroot + '/'],
  ...extra,
];
process.stdout.write(
  `export FAKE_FC_UID=${opts.get('--uid')} FAKE_FC_GID=${opts.get('--gid')}; cd ${q(chroot)} && exec ${cmd.map(q).join(' ')}\n`,
);
