/**
 * Staging a container rootfs on the local disk, from what this host and this package already hold:
 * the running Node binary with the shared libraries it needs, a shell, and the package's own files
 * with their production dependencies. No registry and no base image are involved, so an image can
 * be built on a machine that only has a container engine.
 *
 * Layout (all under /opt/kici, so a job image can mount it read-only as the injected runtime):
 *   bin/node  the Node binary (stripped), lib/ its shared libraries and loader,
 *   app/      the package files the image runs, package.json and the production dependencies.
 */
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  realpathSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join, relative, sep } from 'node:path';

export const OPT = '/opt/kici';

/** The base directories and the Node runtime; returns the dynamic loader's path inside the image. */
export function stageNode(stage: string, nodeBin: string, say: (m: string) => void): string {
  const opt = join(stage, 'opt/kici');
  for (const d of ['bin', 'lib', 'app', 'etc']) mkdirSync(join(opt, d), { recursive: true });
  for (const d of ['bin', 'tmp', 'etc', 'root', 'work']) mkdirSync(join(stage, d), { recursive: true });
  chmodSync(join(stage, 'tmp'), 0o1777);
  copyFileSync(nodeBin, join(opt, 'bin/node'));
  try {
    execFileSync('strip', ['--strip-debug', join(opt, 'bin/node')]);
  } catch {
    say('strip not found; the image keeps node debug symbols');
  }
  let loader = '';
  for (const lib of sharedLibs(nodeBin)) {
    copyFileSync(realpathSync(lib), join(opt, 'lib', basename(lib)));
    if (/ld-linux|ld-musl/.test(basename(lib))) loader = `${OPT}/lib/${basename(lib)}`;
  }
  if (!loader) throw new Error(`no dynamic loader found in the ldd output of ${nodeBin}`);
  return loader;
}

/** A shell for the steps: a static busybox when the host has one (no libraries needed), else dash. */
export function stageShell(stage: string, say: (m: string) => void): void {
  const busybox = ['/usr/bin/busybox', '/bin/busybox'].find((p) => existsSync(p));
  if (busybox) {
    copyFileSync(busybox, join(stage, 'bin/busybox'));
    const applets = execFileSync(busybox, ['--list'], { encoding: 'utf8' }).split('\n').filter(Boolean);
    for (const a of applets)
      if (a !== 'busybox' && !a.includes('/')) symlinkSync('busybox', join(stage, 'bin', a));
    return;
  }
  copyFileSync('/bin/dash', join(stage, 'bin/sh'));
  for (const lib of sharedLibs('/bin/dash'))
    copyFileSync(realpathSync(lib), join(stage, 'opt/kici/lib', basename(lib)));
  say('no busybox on this host: /bin/sh is dash only, with no other tools');
}

export function sharedLibs(bin: string): string[] {
  const out = execFileSync('ldd', [bin], { encoding: 'utf8' });
  const paths: string[] = [];
  for (const line of out.split('\n')) {
    const m = /=>\s*(\/\S+)/.exec(line) ?? /^\s*(\/\S+)/.exec(line);
    if (m) paths.push(m[1]!);
  }
  return paths;
}

/** Copy `files` (under `root`) to the same relative places under `app`. */
export function stageFiles(root: string, app: string, files: Iterable<string>): void {
  for (const f of files) {
    const to = join(app, relative(root, f));
    mkdirSync(dirname(to), { recursive: true });
    copyFileSync(f, to);
  }
}

/** Copy the packages named and their production dependencies into `app/node_modules`. */
export function stagePackages(root: string, app: string, names: Iterable<string>): void {
  for (const { name, dir } of packageClosure(root, names)) {
    const rel = relative(root, dir);
    // A package hoisted above the install (`npm install --prefix`) keeps its place under the
    // outermost node_modules, so nested versions stay nested.
    const outer = dir.indexOf(`${sep}node_modules${sep}`);
    const hoisted = rel.startsWith('..') || rel.startsWith(sep);
    const to = !hoisted ? rel : outer >= 0 ? dir.slice(outer + 1) : join('node_modules', name);
    cpSync(dir, join(app, to), { recursive: true, dereference: true });
  }
}

export function writeAppPackageJson(app: string, name: string, version: string): void {
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name, version, type: 'module' }));
}

/** Relative imports are followed file by file; bare ones name packages (node: builtins skipped). */
export function moduleClosure(entry: string): { files: Set<string>; packages: Set<string> } {
  const files = new Set<string>();
  const packages = new Set<string>();
  const queue = [entry];
  while (queue.length) {
    const f = queue.pop()!;
    if (files.has(f)) continue;
    files.add(f);
    const src = readFileSync(f, 'utf8');
    for (const m of src.matchAll(/(?:from|import)\s*\(?\s*'([^']+)'/g)) {
      const spec = m[1]!;
      if (spec.startsWith('node:')) continue;
      if (spec.startsWith('.')) queue.push(join(dirname(f), spec));
      else packages.add(spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!);
    }
  }
  return { files, packages };
}

/** The packages `names` and their production dependencies, each with its directory. */
function packageClosure(root: string, names: Iterable<string>): { name: string; dir: string }[] {
  const dirs: { name: string; dir: string }[] = [];
  const seen = new Set<string>();
  const queue = [...names].map((n) => ({ name: n, from: root }));
  while (queue.length) {
    const { name, from } = queue.pop()!;
    const dir = packageDir(root, name, from);
    if (seen.has(dir)) continue;
    seen.add(dir);
    dirs.push({ name, dir });
    const meta = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
      dependencies?: Record<string, string>;
    };
    for (const dep of Object.keys(meta.dependencies ?? {})) queue.push({ name: dep, from: dir });
  }
  return dirs;
}

function packageDir(root: string, name: string, from: string): string {
  for (let d = from; ; d = dirname(d)) {
    const candidate = join(d, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json')))
      return candidate.startsWith(root) ? candidate : realpathSync(candidate);
    if (dirname(d) === d) break;
  }
  // Fall back to Node's own resolution (hoisted or symlinked layouts).
  return dirname(createRequire(join(from, 'x.js')).resolve(`${name}/package.json`));
}
