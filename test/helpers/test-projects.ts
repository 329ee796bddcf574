/**
 * How the unit and end-to-end files are split into vitest projects by what they need, read from
 * each file's text so that a new file lands in the right project without a list to keep.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/**
 * What makes a unit file unfit to share its module graph with others (vitest's `isolate: false`):
 * an embedded database, a process of its own, or a change to process-wide state (environment,
 * mocks, working directory, umask). Matched in the file and in the test helpers it imports.
 */
const NEEDS_ISOLATION = new RegExp(
  [
    String.raw`@electric-sql/pglite`,
    String.raw`openDatabase`,
    String.raw`helpers/(data-dir|manager-harness|recording-contract-fixture|store-contract|claim-store|orchestrator|processes|marked-daemons|fake-[a-z-]+|tcp-proxy|socket-proxy)\.js`,
    String.raw`node:child_process`,
    String.raw`vi\.(mock|doMock|stubEnv|stubGlobal)\(`,
    String.raw`process\.env(\.\w+|\[[^\]]+\])\s*=[^=]`,
    String.raw`delete process\.env`,
    String.raw`process\.(chdir|umask)\(`,
  ].join('|'),
);

/**
 * End-to-end files that restart servers, install the tarball or fuzz: one at a time, in their own
 * lane (scripts/test-lanes.ts runs it beside the other tiers). Two long files that need no lane of
 * their own go here as well, so that the two lanes end together: `npm test` lasts as long as the
 * longer one.
 */
export const SERIAL_E2E = [
  // Kill or restart a server and expect its agents to be found again (or reaped) as orphans.
  'test/e2e/crash-recovery.test.ts',
  'test/e2e/rolling-restart.test.ts',
  'test/e2e/reap-orphans.test.ts',
  'test/e2e/adversarial/recycled-pid.test.ts',
  'test/e2e/adversarial/teardown-tree.test.ts',
  'test/e2e/provisional-start.test.ts',
  // Servers as processes whose agents must all be gone from the host at the end.
  'test/e2e/cli.test.ts',
  'test/e2e/readme-walkthrough.test.ts',
  'test/e2e/install-from-tarball.test.ts',
  // Fuzzers: CPU-bound; one at a time is enough.
  'test/e2e/adversarial/http-fuzz.test.ts',
  'test/e2e/adversarial/ws-fuzz.test.ts',
  // For balance: the main lane's two longest files (about 55 s of its 300).
  'test/e2e/agent-day2.test.ts',
  'test/e2e/job-commands.test.ts',
];

/**
 * The system suite runs as two halves at once (scripts/system-test.sh sets KICI_SYSTEM_PART): these
 * files, and the rest. Every file that boots a QEMU guest is here, so guests of two files never
 * boot at once: a guest is emulated (TCG), and two files' guests at once beside the chaos lanes'
 * have starved a boot past a test's deadline on a 2-core host. A test that boots a guest must be
 * listed here (test/unit/lint/system-parts.test.ts checks it).
 */
export const SYSTEM_PART_VM = [
  'test/system/metrics-backends.test.ts',
  'test/system/backend-contract-vm-qemu.test.ts',
  'test/system/vm-qemu.test.ts',
  'test/system/vm-qemu-crash.test.ts',
  'test/system/vm-token-takeover.test.ts',
  'test/system/chaos.test.ts',
];

/**
 * Engine-suite files that only apply to Docker (docker-compose speaks Docker's API and Docker's
 * networking; a remote engine over TLS is a dockerd of the test's own): left out of the Podman run
 * of the suite rather than skipped inside it.
 */
export const DOCKER_ONLY_ENGINE = [
  'test/system/engine/compose-cluster.test.ts',
  'test/system/engine/docker-tls.test.ts',
];

/**
 * The engine suite's one long file. Its cells stop the engine's service, so no other part of the
 * same engine's suite may run beside it: scripts/system-test.sh runs it as a part of its own
 * (KICI_ENGINE_PART=chaos) after the rest of that engine's suite (KICI_ENGINE_PART=rest).
 */
export const ENGINE_CHAOS = 'test/system/engine/chaos-container.test.ts';

/**
 * The engine suite's include and exclude for `engine` (KICI_TEST_ENGINE) and `part`
 * (KICI_ENGINE_PART: `chaos`, `rest`, or unset: the whole suite).
 */
export function engineFiles(
  engine: string | undefined,
  part: string | undefined,
): { include: string[]; exclude: string[] } {
  const only = engine === 'podman' ? DOCKER_ONLY_ENGINE : [];
  if (part === 'chaos') return { include: [ENGINE_CHAOS], exclude: only };
  const include = ['test/system/engine/**/*.test.ts'];
  if (part === 'rest') return { include, exclude: [...only, ENGINE_CHAOS] };
  if (part) throw new Error(`KICI_ENGINE_PART: expected chaos or rest, got "${part}"`);
  return { include, exclude: only };
}

/** The system project's include and exclude for KICI_SYSTEM_PART (`vm`, `rest`, or unset: all). */
export function systemPart(part: string | undefined): { include: string[]; exclude: string[] } {
  const engine = 'test/system/engine/**';
  if (part === 'vm') return { include: SYSTEM_PART_VM, exclude: [engine] };
  if (part === 'rest') return { include: ['test/system/**/*.test.ts'], exclude: [engine, ...SYSTEM_PART_VM] };
  if (part) throw new Error(`KICI_SYSTEM_PART: expected vm or rest, got "${part}"`);
  return { include: ['test/system/**/*.test.ts'], exclude: [engine] };
}

function testFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.test.ts'))
    .map((f) => join(dir, f))
    .sort();
}

/** Does `file`, or a test helper it imports (transitively), need a process of its own? */
function needsIsolation(file: string, seen = new Set<string>()): boolean {
  if (seen.has(file)) return false;
  seen.add(file);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return false; // a path built at run time, or a package: not a helper of ours
  }
  if (NEEDS_ISOLATION.test(text)) return true;
  for (const m of text.matchAll(/from '(\.{1,2}\/[^']+)\.js'/g)) {
    const target = resolve(dirname(file), `${m[1]}.ts`);
    // Only our own test code is followed: src/ is what the tests exercise, not how they run.
    if (!relative(resolve('test'), target).startsWith('..') && needsIsolation(target, seen)) return true;
  }
  return false;
}

/** Unit files that start no database or process and touch no process-wide state. */
export function sharedModuleUnitFiles(root: string): string[] {
  return testFiles(join(root, 'test/unit'))
    .filter((f) => !needsIsolation(f))
    .map((f) => relative(root, f));
}
