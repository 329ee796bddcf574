import type { Hono } from 'hono';
import { encodeBackup } from '../store/backup.js';
import { packageVersion } from '../version.js';
import type { Clock } from '../util/clock.js';

/**
 * GET /api/v1/backup: a consistent snapshot of the embedded database, taken while the server
 * keeps serving, as a backup file (`kici-admin backup --out FILE` writes it). PostgreSQL is
 * backed up with its own tools.
 */
export function registerBackupRoute(
  app: Hono,
  deps: { snapshot?: (() => Promise<Uint8Array>) | undefined; clock: Clock },
): void {
  app.get('/api/v1/backup', async (c) => {
    if (!deps.snapshot)
      return c.json(
        {
          error: 'conflict',
          problems: ['this orchestrator uses PostgreSQL: back it up with pg_dump (see docs/install.md)'],
        },
        409,
      );
    const file = encodeBackup(await deps.snapshot(), {
      createdAt: new Date(deps.clock.now()),
      version: packageVersion(),
    });
    return c.body(new Uint8Array(file), 200, {
      'content-type': 'application/octet-stream',
      'content-length': String(file.byteLength),
    });
  });
}
