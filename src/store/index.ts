import type { Kysely } from 'kysely';
import { AccessTokensRepo } from './access-tokens-repo.js';
import { AgentsRepo } from './agents-repo.js';
import { AuditRepo } from './audit-repo.js';
import { JobsRepo } from './jobs-repo.js';
import { LogsRepo } from './logs-repo.js';
import { SessionsRepo } from './sessions-repo.js';
import { SpawnsRepo } from './spawns-repo.js';
import { TokensRepo } from './tokens-repo.js';
import type { Database } from './schema.js';
import type { StoreEngine } from './open.js';
import { HeldSync, type SyncGate } from './sync-gate.js';

/** How long the embedded store keeps a live access token between checks. */
const KEEP_LIVE_TOKENS_MS = 10_000;

export interface Store {
  db: Kysely<Database>;
  jobs: JobsRepo;
  logs: LogsRepo;
  agents: AgentsRepo;
  tokens: TokensRepo;
  spawns: SpawnsRepo;
  sessions: SessionsRepo;
  accessTokens: AccessTokensRepo;
  audit: AuditRepo;
}

/**
 * `engine`: on the embedded store this process is the database's one writer, so live access tokens
 * can be kept between calls (AccessTokensRepo); on PostgreSQL each check reads the row.
 */
export function createStore(
  db: Kysely<Database>,
  engine: StoreEngine = 'postgres',
  /** The embedded database's syncs (OpenedDatabase.syncGate): the job-start writes hold theirs. */
  syncGate?: SyncGate,
): Store {
  const held = new HeldSync(db, syncGate);
  return {
    db,
    jobs: new JobsRepo(db, held),
    logs: new LogsRepo(db),
    agents: new AgentsRepo(db),
    tokens: new TokensRepo(db, { keepUnused: engine === 'pglite' }),
    spawns: new SpawnsRepo(db, held),
    sessions: new SessionsRepo(db),
    accessTokens: new AccessTokensRepo(db, { keepLiveMs: engine === 'pglite' ? KEEP_LIVE_TOKENS_MS : 0 }),
    audit: new AuditRepo(db),
  };
}

export { openDatabase, type OpenedDatabase, type StoreEngine } from './open.js';
export type * from './schema.js';
export { JOB_STATES, TERMINAL_JOB_STATES } from './schema.js';
export type { JobRow } from './jobs-repo.js';
export type { HeldWrite } from './sync-gate.js';
export { hashSecret } from './tokens-repo.js';
