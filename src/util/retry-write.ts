/**
 * Retry a store write in the background until it succeeds or `stillWanted` turns false.
 *
 * Used for writes that must not be dropped while the database is briefly away (a result the
 * agent is holding for us, a claim whose outcome we did not hear). The delay doubles from
 * `firstMs` up to `maxMs`, so an outage costs a few queries a second, not a busy loop.
 * `attempt` resolves false for "not done yet, try again" and throws for the same reason.
 */
export function retryWrite(
  attempt: () => Promise<boolean>,
  stillWanted: () => boolean,
  onError: (err: unknown) => void,
  opts: { firstMs?: number; maxMs?: number } = {},
): Promise<boolean> {
  const maxMs = opts.maxMs ?? 5_000;
  let delay = opts.firstMs ?? 250;
  return new Promise((resolve) => {
    const tick = () => {
      if (!stillWanted()) return resolve(false);
      attempt().then(
        (done) => {
          if (done) return resolve(true);
          schedule();
        },
        (err: unknown) => {
          onError(err);
          schedule();
        },
      );
    };
    const schedule = () => {
      const t = setTimeout(tick, delay);
      t.unref();
      delay = Math.min(delay * 2, maxMs);
    };
    schedule();
  });
}
