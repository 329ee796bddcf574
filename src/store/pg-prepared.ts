import type pg from 'pg';

/**
 * Named prepared statements on PostgreSQL for the few statements a job runs every time (the group
 * commit). A statement sent without a name is parsed and planned by the server on every run, and
 * its whole text crosses the socket each time; a named one is parsed once per connection and
 * afterwards travels as its name and parameters. Only texts registered here get a name, so a
 * statement whose text varies (a multi-row insert) never fills a connection with one-off plans.
 *
 * A registered statement must name the columns it returns: a prepared `returning *` would fail
 * once a newer instance's migration added a column to the table.
 */
const names = new Map<string, string>();
/** A bound on the registry: registered texts come from a fixed set of shapes, never from data. */
const MAX_NAMED = 64;

/** Mark `text` as prepared on PostgreSQL (from its next run); returns `text` unchanged. */
export function prepared(text: string): string {
  if (!names.has(text) && names.size < MAX_NAMED) names.set(text, `kici_hot_${names.size}`);
  return text;
}

/** Send the registered statements of this client under their names; any other query as it was. */
export function namePreparedStatements(client: pg.ClientBase): void {
  const plain = client.query.bind(client) as (...args: unknown[]) => unknown;
  const named = (text: unknown, values?: unknown, callback?: unknown): unknown => {
    const name = typeof text === 'string' && Array.isArray(values) ? names.get(text) : undefined;
    return name ? plain({ name, text, values }, callback) : plain(text, values, callback);
  };
  client.query = named as typeof client.query;
}
