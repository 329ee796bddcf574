import { rename, rm, writeFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { UserError } from '../../util/errors.js';
import type { AdminClient } from './client.js';

export function registerBackupCommand(program: Command, client: (c: Command) => Promise<AdminClient>): void {
  program
    .command('backup')
    .description('write a consistent snapshot of the embedded database, taken while the server runs')
    .requiredOption('--out <file>', 'the backup file to write (restore it with kici-orchestrator restore)')
    .action(async (o: { out: string }, cmd: Command) => {
      const file = await (await client(cmd)).download('/api/v1/backup');
      // Checked before it is kept: a copy damaged on the way is never left looking like a backup.
      // Loaded here, not at start-up: the embedded database it pulls in would slow every other command.
      const { decodeBackup } = await import('../../store/backup.js');
      const { header } = decodeBackup(file, 'the backup received');
      const tmp = `${o.out}.partial`;
      try {
        await writeFile(tmp, file, { mode: 0o600, flag: 'wx' });
        await rename(tmp, o.out);
      } catch (err) {
        await rm(tmp, { force: true });
        throw new UserError(`--out ${o.out}: cannot write the backup (${(err as Error).message})`);
      }
      process.stdout.write(
        `backup written to ${o.out}: ${header.bytes} bytes, sha256 ${header.sha256}, taken ${header.createdAt}\n`,
      );
    });
}
