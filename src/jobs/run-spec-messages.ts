/**
 * Run-spec problems in the scaler config's words: the config's error map ("expected a number, got
 * the string …", "did you mean …") with every key a sender wrote clipped before it is echoed back.
 */
import type { z } from 'zod';
import { friendlyIssueMessage } from '../config/messages.js';
import { clip } from './safe-text.js';

type RawIssue = z.core.$ZodRawIssue;

export function runSpecIssueMessage(iss: RawIssue): string | undefined {
  if (iss.code === 'unrecognized_keys') {
    const keys = iss.keys.slice(0, 5).map((k) => clip(k));
    return friendlyIssueMessage({ ...iss, keys } as RawIssue);
  }
  return friendlyIssueMessage(iss);
}

/**
 * `runson: [linux]` is reported as an unknown key with "did you mean runsOn"; a second line saying
 * runsOn is required would only repeat it, so that one is dropped.
 */
export function dropShadowedRequired(issues: z.core.$ZodIssue[]): z.core.$ZodIssue[] {
  const at = (path: readonly PropertyKey[]) => JSON.stringify(path.map(String));
  const meant = new Set<string>();
  for (const i of issues) {
    if (i.code !== 'unrecognized_keys') continue;
    for (const m of i.message.matchAll(/did you mean "([^"]+)"/g)) meant.add(at([...i.path, m[1]!]));
  }
  return issues.filter((i) => !(i.message.startsWith('required') && meant.has(at(i.path))));
}
