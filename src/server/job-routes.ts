/** Job routes added for day-2 work (`job retry`); registered by createHttpApi. */
import type { Hono } from 'hono';
import { retryJob } from '../jobs/retry.js';
import type { Dispatcher } from '../dispatch/dispatcher.js';
import type { JobRow, Store } from '../store/index.js';
import type { Clock } from '../util/clock.js';

export interface JobRouteDeps {
  store: Store;
  dispatcher: Dispatcher;
  clock: Clock;
  /** How a job row is shown (the API's job view), passed in so this file needs no import back. */
  view: (row: JobRow) => unknown;
}

export function registerJobRoutes(app: Hono, deps: JobRouteDeps): void {
  // POST /api/v1/jobs/:id/retry → 201 with the new job; 409 while this job (or another attempt of it) is open.
  app.post('/api/v1/jobs/:id/retry', async (c) => {
    const id = c.req.param('id');
    const res = await retryJob(deps.store, deps.dispatcher, id, new Date(deps.clock.now()));
    if (res.kind === 'not-found')
      return c.json({ error: 'not found', problems: [`job ${id} does not exist`] }, 404);
    if (res.kind === 'sealed')
      return c.json(
        {
          error: 'conflict',
          problems: [
            `job ${id} is a provisioning job: its claim code was delivered once and not kept, so it cannot run again; the scaler provisions again when an agent is still needed`,
          ],
        },
        409,
      );
    if (res.kind === 'open') {
      const problem =
        res.open.id === id
          ? `job ${id} is still ${res.job.state}; only a finished job can be retried`
          : `job ${id} has an attempt that is still ${res.open.state} (${res.open.id}); retry once it has finished`;
      return c.json({ error: 'conflict', problems: [problem] }, 409);
    }
    return c.json(deps.view(res.job), 201);
  });
}
