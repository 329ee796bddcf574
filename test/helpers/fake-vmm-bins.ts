import { chmod, mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { NODE, ROOT } from './orchestrator.js';

export interface FakeVmmBins {
  /** Stands for the firecracker binary: the fake API server (test/helpers/fake-firecracker.ts). */
  firecracker: string;
  /** Stands for the jailer (test/helpers/fake-jailer.ts); execs `firecracker` from its chroot. */
  jailer: string;
  /** One JSON line per API request the fake firecracker received, with its check errors. */
  requestLog: string;
  /** One JSON line per jailer command line accepted. */
  jailerLog: string;
}

/**
 * Write the fake firecracker and jailer into `dir`. Node runs through a link named `firecracker`,
 * so the fake's process name (comm) is the real one's and pid-ownership checks see a firecracker.
 */
export async function writeFakeVmmBins(dir: string): Promise<FakeVmmBins> {
  const nodeAs = join(dir, 'node-as');
  await mkdir(nodeAs, { recursive: true });
  await symlink(NODE, join(nodeAs, 'firecracker'));
  const bins: FakeVmmBins = {
    firecracker: join(dir, 'firecracker'),
    jailer: join(dir, 'jailer'),
    requestLog: join(dir, 'requests.jsonl'),
    jailerLog: join(dir, 'jailer.jsonl'),
  };
  const fc = join(ROOT, 'test/helpers/fake-firecracker.ts');
  await writeFile(
    bins.firecracker,
    `#!/bin/sh\nFAKE_FC_LOG='${bins.requestLog}' exec '${join(nodeAs, 'firecracker')}' '${fc}' "$@"\n`,
  );
  // The fake jailer prepares the chroot and prints the command to run there (it cannot exec itself).
  const jailer = join(ROOT, 'test/helpers/fake-jailer.ts');
  await writeFile(
    bins.jailer,
    `#!/bin/sh\ncmd=$(FAKE_JAILER_LOG='${bins.jailerLog}' '${NODE}' '${jailer}' "$@") || exit $?\neval "$cmd"\n`,
  );
  await chmod(bins.firecracker, 0o755);
  await chmod(bins.jailer, 0o755);
  return bins;
}
