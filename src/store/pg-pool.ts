import pg from 'pg';
import { errorMessage } from '../util/errors.js';
import { namePreparedStatements } from './pg-prepared.js';

/** Connections kept open while idle. */
const IDLE_KEPT = 4;

/** Where a lost connection is reported; the store itself has no logger. */
export type ConnectionErrorSink = (err: unknown, where: 'idle' | 'in-use') => void;

/**
 * A pool for an external PostgreSQL that survives the server ending its connections.
 *
 * `pg` emits 'error' on a client whose socket breaks, and on the pool for an idle one. An 'error'
 * event with no listener is thrown by Node and kills the process — which is what a restart of
 * PostgreSQL or `pg_terminate_backend` did to the orchestrator. Every client therefore gets a
 * listener for its whole life: the broken client is no longer queryable, so the pool drops it on
 * release, the query that was running on it rejects to its caller, and the next checkout opens a
 * fresh connection.
 */
export function createPgPool(url: string, onError: ConnectionErrorSink, max = 10): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    max,
    // A connection returned to the pool arms an idle timer on every query unless the pool is at
    // or below its minimum: the few connections a steady load uses are kept (no timer per query),
    // and only the extra ones a spike opened are closed when idle.
    min: Math.min(IDLE_KEPT, max),
    // A database that is away must fail a checkout, not park it forever: /readyz and callers
    // need an answer to report "not ready".
    connectionTimeoutMillis: 5_000,
    // Dead peers behind a half-open TCP path are noticed by the kernel instead of never.
    keepAlive: true,
  });
  pool.on('error', (err) => onError(err, 'idle'));
  pool.on('connect', (client) => {
    client.on('error', (err) => onError(err, 'in-use'));
    namePreparedStatements(client);
  });
  return pool;
}

/** One log line per outage rather than one per broken client. */
export function throttledConnectionLog(
  log: (fields: Record<string, unknown>, msg: string) => void,
  windowMs = 5_000,
): ConnectionErrorSink {
  let lastMs = 0;
  let suppressed = 0;
  return (err, where) => {
    const now = Date.now();
    if (now - lastMs < windowMs) {
      suppressed++;
      return;
    }
    log(
      { err: errorMessage(err), where, alsoLost: suppressed },
      'lost a PostgreSQL connection; later queries reconnect',
    );
    lastMs = now;
    suppressed = 0;
  };
}
