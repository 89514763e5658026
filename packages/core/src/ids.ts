/**
 * Identifiers shared by every layer. They end up inside Redis key names and notice strings
 * (`req:<id>`, `grant|<id>|<pod>`), so their alphabet is restricted: no braces (they would
 * change a key's Redis Cluster hash slot), no `|` (the notice and counter separator), no
 * whitespace or control characters.
 */
export type TenantId = string;
export type RequestId = string;
export type ReplicaId = string;
export type PodName = string;

/**
 * A priority band. Higher numbers dispatch first (strict priority across bands); the SLO
 * class priorities (critical 4 ... background -3) are used directly as band numbers.
 */
export type Band = number;

const NAME_PATTERN = /^[A-Za-z0-9._:@/-]{1,200}$/;

/** Whether `value` may be used as a tenant, request, replica or pod identifier. */
export function isValidName(value: string): boolean {
  return NAME_PATTERN.test(value);
}

/** Throws a precise error naming the field when `value` is not a usable identifier. */
export function assertValidName(field: string, value: unknown): asserts value is string {
  if (typeof value !== 'string' || !NAME_PATTERN.test(value)) {
    throw new TypeError(
      `${field} must be 1-200 characters of [A-Za-z0-9._:@/-], got ${JSON.stringify(value)}`,
    );
  }
}

/** Throws unless `value` is an integer in [min, max]. */
export function assertInteger(
  field: string,
  value: unknown,
  min = Number.MIN_SAFE_INTEGER,
  max = Number.MAX_SAFE_INTEGER,
): asserts value is number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new TypeError(`${field} must be an integer in [${min}, ${max}], got ${String(value)}`);
  }
}
