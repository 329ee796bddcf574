import { Migrator, type Kysely, type Migration, type MigrationProvider } from 'kysely';
import { clusterMigrations } from './migrations/cluster.js';
import { coreMigrations } from './migrations/core.js';
import { laterMigrations } from './migrations/later.js';

/**
 * One set of migrations for both engines (PGlite and PostgreSQL). They are code, not files, so the
 * built package carries them and nothing is read from disk at start-up. Kysely runs them in the
 * order of their names, whichever file holds them.
 */
const migrations: Record<string, Migration> = { ...coreMigrations, ...clusterMigrations, ...laterMigrations };

const provider: MigrationProvider = { getMigrations: async () => migrations };

export async function migrateToLatest(db: Kysely<unknown>): Promise<void> {
  const migrator = new Migrator({
    db,
    provider,
    migrationTableName: 'kici_migrations',
    migrationLockTableName: 'kici_migrations_lock',
  });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error || failed) {
    throw new Error(`database migration failed${failed ? ` at ${failed.migrationName}` : ''}`, {
      cause: error,
    });
  }
}
