import type { ResourceRequest } from './resources.js';

/** Resources are mirrored at parse, so a limits-only block has requests too. */
function requestsAreEmpty(resources: ResourceRequest | undefined): boolean {
  const requests = resources?.requests;
  return !requests || (!requests.cpus && !requests.memory);
}

/**
 * Why a warm pool leaves this label set cold, or undefined when it keeps agents warm for it.
 * One predicate for `scaler validate` (the warning) and the running pools (the skip), so the
 * warning says exactly what the server does. A warm agent is made before any job exists, so its
 * size must come from the label set or the defaults; with neither it would have no known shape.
 */
export function warmSkipReason(
  labelSet: { resources?: ResourceRequest | undefined },
  defaults: { resources?: ResourceRequest | undefined } | undefined,
): string | undefined {
  if (requestsAreEmpty(labelSet.resources) && requestsAreEmpty(defaults?.resources))
    return 'declare resources so a warm agent has a known size';
  return undefined;
}
