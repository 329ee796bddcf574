/**
 * `node scripts/build-postgres-image.ts [tag]` (after npm run build): a small PostgreSQL image for tests, built from the host's own PostgreSQL binaries: no registry is
 * reachable from the test machines, so the compose example's `postgres:16` cannot be pulled. The
 * server, its libraries (the ones ldd names, at the same paths) and a busybox shell are staged and
 * imported like the kici images. It honours the official image's POSTGRES_USER, POSTGRES_PASSWORD
 * and POSTGRES_DB on first start, keeps its data in /var/lib/postgresql/data, runs as `postgres`,
 * and has pg_isready on PATH for the compose health check. Loaded into DOCKER_HOST; the tag
 * (default kici-test/postgres:1) is printed.
 */
import {
  chmodSync,
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { importRootfs, packRootfs } from '../dist/image/engine-import.js';
import { sharedLibs } from '../dist/image/rootfs.js';

const UID = 70;

/** The host's PostgreSQL major version directory, e.g. /usr/lib/postgresql/15. */
function hostPostgres(): { lib: string; share: string; major: string } {
  const base = '/usr/lib/postgresql';
  const major = readdirSync(base)
    .filter((d) => existsSync(join(base, d, 'bin/postgres')))
    .sort((a, b) => Number(b) - Number(a))[0];
  if (!major) throw new Error(`no PostgreSQL server under ${base}: install the postgresql package`);
  return { lib: join(base, major), share: `/usr/share/postgresql/${major}`, major };
}

const ENTRY = (bin: string) => `#!/bin/sh
# First start: make the cluster the way the official image does, from the same variables.
set -e
B=${bin}
: "\${POSTGRES_USER:=postgres}" "\${PGDATA:=/var/lib/postgresql/data}" "\${POSTGRES_DB:=$POSTGRES_USER}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  [ -n "$POSTGRES_PASSWORD" ] || { echo "POSTGRES_PASSWORD must be set" >&2; exit 1; }
  printf '%s\\n' "$POSTGRES_PASSWORD" > /tmp/pw
  "$B/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile=/tmp/pw -A scram-sha-256 -E UTF8 --locale=C -N >/dev/null
  rm -f /tmp/pw
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    echo "CREATE DATABASE \\"$POSTGRES_DB\\" OWNER \\"$POSTGRES_USER\\"" | "$B/postgres" --single -D "$PGDATA" postgres >/dev/null
  fi
fi
exec "$B/postgres" -D "$PGDATA" -c listen_addresses='*' "$@"
`;

export async function buildPostgresImage(host: string, ref: string): Promise<string> {
  const pg = hostPostgres();
  const work = mkdtempSync(join(tmpdir(), 'kici-pg-image-'));
  try {
    const stage = join(work, 'rootfs');
    const put = (src: string, to = src) => {
      mkdirSync(dirname(join(stage, to)), { recursive: true });
      cpSync(src, join(stage, to), { recursive: true, dereference: true });
    };
    // The JIT (and the LLVM it links, most of the size) is left out: the server runs without it.
    const jit = (path: string) => /llvmjit|bitcode/.test(path);
    mkdirSync(join(stage, pg.lib), { recursive: true });
    cpSync(pg.lib, join(stage, pg.lib), { recursive: true, dereference: true, filter: (p) => !jit(p) });
    put(pg.share);
    if (existsSync('/usr/share/zoneinfo/UTC')) put('/usr/share/zoneinfo/UTC');
    const binaries = readdirSync(join(pg.lib, 'bin')).map((b) => join(pg.lib, 'bin', b));
    const modules = readdirSync(join(pg.lib, 'lib'), { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile() && e.name.endsWith('.so') && !jit(e.name))
      .map((e) => join(e.parentPath, e.name));
    const libs = new Set<string>();
    for (const f of [...binaries, ...modules])
      try {
        for (const l of sharedLibs(f)) libs.add(l);
      } catch {
        // scripts among the binaries (pg_ctlcluster helpers) have no libraries
      }
    for (const l of libs) {
      mkdirSync(dirname(join(stage, l)), { recursive: true });
      copyFileSync(realpathSync(l), join(stage, l));
    }
    mkdirSync(join(stage, 'bin'), { recursive: true });
    copyFileSync('/bin/busybox', join(stage, 'bin/busybox'));
    for (const a of ['sh', 'cat', 'echo', 'rm', 'printf', 'mkdir', 'ls'])
      symlinkSync('busybox', join(stage, 'bin', a));
    for (const d of ['tmp', 'etc', 'var/lib/postgresql/data', 'var/run/postgresql'])
      mkdirSync(join(stage, d), { recursive: true });
    chmodSync(join(stage, 'tmp'), 0o1777);
    writeFileSync(
      join(stage, 'etc/passwd'),
      `root:x:0:0::/root:/bin/sh\npostgres:x:${UID}:${UID}::/var/lib/postgresql:/bin/sh\n`,
    );
    writeFileSync(join(stage, 'etc/group'), `root:x:0:\npostgres:x:${UID}:\n`);
    writeFileSync(join(stage, 'entrypoint.sh'), ENTRY(join(pg.lib, 'bin')), { mode: 0o755 });
    const tarFile = join(work, 'rootfs.tar');
    const owned = ['var/lib/postgresql', 'var/lib/postgresql/data', 'var/run/postgresql'];
    await packRootfs(
      stage,
      tarFile,
      owned.map((path) => ({ path, uid: UID, gid: UID })),
    );
    await importRootfs(host, tarFile, ref, [
      'ENTRYPOINT ["/entrypoint.sh"]',
      `ENV PATH=${join(pg.lib, 'bin')}:/bin`,
      'ENV PGDATA=/var/lib/postgresql/data',
      'ENV TZ=UTC',
      `USER ${UID}:${UID}`,
      'VOLUME /var/lib/postgresql/data',
      'EXPOSE 5432',
    ]);
    return ref;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const host = process.env.DOCKER_HOST || 'unix:///var/run/docker.sock';
  process.stdout.write(`${await buildPostgresImage(host, process.argv[2] || 'kici-test/postgres:1')}\n`);
}
