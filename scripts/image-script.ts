/** The npm image scripts: the installed command, run from this checkout's built dist/. */
import { join } from 'node:path';

type RunAdmin = (argv: string[]) => Promise<number>;

export async function runImageScript(
  command: 'build-agent' | 'build-orchestrator',
  tag: string | undefined,
  node: string | undefined,
): Promise<void> {
  const admin = join(import.meta.dirname, '../dist/cli/admin/program.js');
  const { runAdmin } = (await import(admin)) as { runAdmin: RunAdmin };
  const args = ['image', command, ...(tag ? ['--tag', tag] : []), ...(node ? ['--node', node] : [])];
  process.exitCode = await runAdmin(args);
}
