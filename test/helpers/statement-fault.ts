/**
 * The real store seen through Kysely plugins: one records each statement as it is compiled and
 * sent, the other makes chosen statements fail there, as a dropped connection to the store would.
 */
import type { KyselyPlugin, QueryId } from 'kysely';
import type { OpenedDatabase } from '../../src/store/open.js';

/** The agent's session row, written once a registration has proved the agent. */
export const SESSION_INSERT = /^insert into "?agent_sessions"?/;

/** A scaler's spawn row, written as it starts an agent. */
export const SPAWN_ROW = /^with "spawning" as \(insert into "scaler_spawning_agents"/;

/** An event agent's spawn row taken by the orchestrator it registers with (adoption-repo.ts). */
export const SPAWN_ADOPT = /^update "scaler_spawning_agents" set "adopted_by"/;

/** One job's row read by its id (the store's `jobs.get`). */
export const JOB_READ = /^select \* from "jobs" where "id" = \$1$/;

/** A statement's SQL text as sent, on one line. */
function sqlOf(db: OpenedDatabase, node: Parameters<KyselyPlugin['transformQuery']>[0]): string {
  return db.db.getExecutor().compileQuery(node.node, node.queryId).sql.replace(/\s+/g, ' ').trim();
}

/**
 * The database, with every statement's SQL text appended to `sent` in the order it is issued;
 * given `done`, each statement's answer is appended there as `done: <SQL>` when it comes back.
 */
export function recording(db: OpenedDatabase, done?: string[]): { database: OpenedDatabase; sent: string[] } {
  const sent: string[] = [];
  const texts = new WeakMap<QueryId, string>();
  const plugin: KyselyPlugin = {
    transformQuery: (args) => {
      const text = sqlOf(db, args);
      sent.push(text);
      texts.set(args.queryId, text);
      done?.push(text);
      return args.node;
    },
    transformResult: async (args) => {
      done?.push(`done: ${texts.get(args.queryId)}`);
      return args.result;
    },
  };
  return { database: { ...db, db: db.db.withPlugin(plugin) }, sent };
}

/**
 * The database, where the first `times` statements matching `re` throw before they reach the store.
 * `onFault` runs just before each throw (a test stops the agent there, say); `failed` counts them.
 */
export function failing(
  db: OpenedDatabase,
  re: RegExp,
  times = 1,
  onFault: () => void = () => {},
): { database: OpenedDatabase; failed: { n: number } } {
  const failed = { n: 0 };
  const database = failingWhile(
    db,
    re,
    () => failed.n < times,
    () => {
      failed.n++;
      onFault();
    },
  );
  return { database, failed };
}

/**
 * The database, where statements matching `re` throw before they reach the store while `down()`
 * says so (a test fails a later statement, after the same one has gone through before it).
 */
export function failingWhile(
  db: OpenedDatabase,
  re: RegExp,
  down: () => boolean,
  onFault: () => void = () => {},
): OpenedDatabase {
  const plugin: KyselyPlugin = {
    transformQuery: (args) => {
      if (down() && re.test(sqlOf(db, args))) {
        onFault();
        throw new Error('store unavailable (injected)');
      }
      return args.node;
    },
    transformResult: async (args) => args.result,
  };
  return { ...db, db: db.db.withPlugin(plugin) };
}
