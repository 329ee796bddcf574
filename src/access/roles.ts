/**
 * Operator roles, each one a superset of the one before: a `viewer` reads; an `operator` also
 * submits, cancels, retries, drains and reloads; an `admin` also manages tokens and reaps.
 */
export const ROLES = ['viewer', 'operator', 'admin'] as const;
export type Role = (typeof ROLES)[number];

export function isRole(value: unknown): value is Role {
  return typeof value === 'string' && (ROLES as readonly string[]).includes(value);
}

/** Whether a token of role `held` may do what needs `needed`. */
export function roleAllows(held: Role, needed: Role): boolean {
  return ROLES.indexOf(held) >= ROLES.indexOf(needed);
}
