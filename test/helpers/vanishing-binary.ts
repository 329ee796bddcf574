import { chmod, rm, writeFile } from 'node:fs/promises';

/**
 * An agent binary that exists when the orchestrator starts (a missing one stops start-up) and is
 * removed right after, so tests can still drive the classified binary-missing spawn failure an
 * operator sees when the binary goes away on a running host.
 */
export async function vanishingBinary(path: string): Promise<{ path: string; vanish(): Promise<void> }> {
  await writeFile(path, '#!/bin/sh\nexit 1\n');
  await chmod(path, 0o755);
  return { path, vanish: () => rm(path, { force: true }) };
}
