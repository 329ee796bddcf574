import { sql, type Kysely } from 'kysely';
import type { Database } from './schema.js';

/** What the store knows of an agent's session, read at its registration. */
export interface SessionRecord {
  secretHash: string;
  jobsTaken: number;
}

/**
 * Agent sessions. A session is opened at an agent's first registration; only the SHA-256 of its
 * secret is kept. The job count is the server's own: it is never taken from the agent. It is kept
 * for single-use agents only, the one kind whose count decides anything.
 */
export class SessionsRepo {
  constructor(private readonly db: Kysely<Database>) {}

  /**
   * Whether the agent is in use anywhere in the cluster: its socket is recorded as connected (on
   * any instance), or a job is still handed to it (waiting for it to come back).
   */
  async inUse(agentId: string): Promise<boolean> {
    const connected = await this.db
      .selectFrom('agents')
      .select('id')
      .where('id', '=', agentId)
      .where('state', '=', 'connected')
      .executeTakeFirst();
    if (connected) return true;
    const job = await this.db
      .selectFrom('jobs')
      .select('id')
      .where('agent_id', '=', agentId)
      .where('state', 'in', ['dispatched', 'running'])
      .executeTakeFirst();
    return job !== undefined;
  }

  /**
   * Open a session with this secret hash. `replacing` is the hash of the session it supersedes
   * (null for an agent's first): the write happens only if that is still the stored one, so two
   * registrations racing for one agent id cannot both win.
   */
  async open(
    agentId: string,
    secretHash: string,
    replacing: string | null,
    opts: { syncedByNext?: boolean } = {},
  ): Promise<boolean> {
    if (replacing === null) {
      // `syncedByNext`: the caller issues a synced commit right after this one (the bound job's
      // claim), and that commit's flush of the log carries this one too, so this commit does not
      // wait for its own. What a crash in between could lose is a session whose agent then holds a
      // secret the store forgot: it registers as new (decideSession), with no job handed to it yet.
      const relax = opts.syncedByNext
        ? sql`set_config('synchronous_commit', 'off', true) is not null`
        : sql`true`;
      const res = await sql`insert into agent_sessions (agent_id, secret_hash)
        select ${agentId}, ${secretHash} where ${relax}
        on conflict (agent_id) do nothing`.execute(this.db);
      return (res.numAffectedRows ?? 0n) > 0n;
    }
    const res = await this.db
      .updateTable('agent_sessions')
      .set({ secret_hash: secretHash, jobs_taken: 0, opened_at: new Date() })
      .where('agent_id', '=', agentId)
      .where('secret_hash', '=', replacing)
      .executeTakeFirst();
    return res.numUpdatedRows === 1n;
  }

  /** Drop a session whose secret never reached its agent. */
  async forget(agentId: string, secretHash: string): Promise<void> {
    await this.db
      .deleteFrom('agent_sessions')
      .where('agent_id', '=', agentId)
      .where('secret_hash', '=', secretHash)
      .execute();
  }

  /** A single-use agent was handed a job (long-lived agents' jobs are not counted: nothing reads it). */
  async tookJob(agentId: string): Promise<void> {
    await this.db
      .updateTable('agent_sessions')
      .set({ jobs_taken: sql`jobs_taken + 1` })
      .where('agent_id', '=', agentId)
      .execute();
  }
}
