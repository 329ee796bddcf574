import type { Kysely, KyselyPlugin } from 'kysely';

/** The same database, counting every statement sent through it (reads and writes alike). */
export function countingStatements<DB>(db: Kysely<DB>): { n: { statements: number }; db: Kysely<DB> } {
  const n = { statements: 0 };
  const plugin: KyselyPlugin = {
    transformQuery: (args) => (n.statements++, args.node),
    transformResult: async (args) => args.result,
  };
  return { n, db: db.withPlugin(plugin) };
}
