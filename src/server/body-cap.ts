import type { Context, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';

/**
 * The cap on a request body, judged without touching the body where the headers already tell.
 *
 * A body with a content-length cannot be longer than it says (the HTTP parser stops there), so the
 * header alone decides, and the body stays with the Node request: reading it later takes the
 * adapter's direct path. Asking for the body's stream here instead (as a counting wrapper must)
 * builds a whole web Request with its stream for every call: about half a millisecond before a
 * submit reaches its route, on every submit. Only a chunked body, whose length nobody knows
 * ahead, is counted while it streams in, and refused once it passes the cap.
 */
export function bodyCap(
  maxSize: number,
  onError: (c: Context) => Response | Promise<Response>,
): MiddlewareHandler {
  const counted = bodyLimit({ maxSize, onError });
  return async (c, next) => {
    const chunked = c.req.header('transfer-encoding');
    if (chunked === undefined) {
      const declared = c.req.header('content-length');
      // No length and no chunking: an HTTP/1.1 request without a body.
      if (declared === undefined) return next();
      return Number.parseInt(declared, 10) > maxSize ? onError(c) : next();
    }
    return counted(c, next);
  };
}
