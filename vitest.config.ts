import { configDefaults, defineConfig } from 'vitest/config';
import { engineFiles, SERIAL_E2E, sharedModuleUnitFiles, systemPart } from './test/helpers/test-projects.js';

const globalSetup = ['test/helpers/global-setup.ts'];
const sharedModules = sharedModuleUnitFiles(import.meta.dirname);
const tempDirs = ['test/helpers/temp-dirs-cleanup.ts'];
const processGuard = [...tempDirs, 'test/helpers/process-state-guard.ts'];
const engine = engineFiles(process.env.KICI_TEST_ENGINE, process.env.KICI_ENGINE_PART);

/**
 * `npm test` runs the first four projects. The first three run side by side, two files at a time
 * (vitest requires one worker count per group; two keeps a 2-core host busy while most e2e files
 * wait on their agents). `e2e-serial` runs one file at a time, in a second vitest process beside
 * them (scripts/test-lanes.ts): its files restart servers and count their own processes.
 * Timeouts are sized for a 2-core machine under load: a hook that opens a store or starts a server
 * can take several times as long as on an idle one.
 */
const WORKERS = 2;

export default defineConfig({
  test: {
    projects: [
      {
        // Decisions, parsers and protocol: no database, no process, one module graph per worker.
        test: {
          name: 'unit-pure',
          include: sharedModules,
          isolate: false,
          setupFiles: tempDirs,
          maxWorkers: WORKERS,
          testTimeout: 60_000,
          hookTimeout: 60_000,
          globalSetup,
        },
      },
      {
        // Embedded databases (in memory, from the global set-up's dump), processes, process state.
        // These files, like the end-to-end ones, also share a process per worker: loading the module
        // graph once per worker, not once per file, halved the project's time. The guard puts back
        // the environment, umask and working directory a file changed.
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          exclude: sharedModules,
          isolate: false,
          setupFiles: processGuard,
          maxWorkers: WORKERS,
          testTimeout: 60_000,
          hookTimeout: 60_000,
          globalSetup,
        },
      },
      {
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          exclude: SERIAL_E2E,
          isolate: false,
          setupFiles: processGuard,
          maxWorkers: WORKERS,
          testTimeout: 120_000,
          hookTimeout: 120_000,
          globalSetup,
        },
      },
      {
        test: {
          name: 'e2e-serial',
          include: SERIAL_E2E,
          setupFiles: tempDirs,
          maxWorkers: 1,
          fileParallelism: false,
          sequence: { groupOrder: 1 },
          testTimeout: 180_000,
          hookTimeout: 180_000,
          globalSetup,
        },
      },
      {
        test: {
          name: 'system',
          globalSetup,
          isolate: false,
          setupFiles: processGuard,
          ...systemPart(process.env.KICI_SYSTEM_PART),
          testTimeout: 300_000,
          hookTimeout: 300_000,
          fileParallelism: false,
        },
      },
      {
        // Run per engine by scripts/system-test.sh, with KICI_TEST_ENGINE, DOCKER_HOST and KICI_ENGINE_PART set.
        test: {
          name: 'system-engine',
          globalSetup,
          isolate: false,
          setupFiles: [...processGuard, 'test/helpers/engine-setup.ts'],
          include: engine.include,
          exclude: [...configDefaults.exclude, ...engine.exclude],
          testTimeout: 300_000,
          hookTimeout: 300_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
