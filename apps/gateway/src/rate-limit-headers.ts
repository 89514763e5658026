import type { TenantConfig } from '@fairgate/config';
import type { LimitStanding, LimitsStanding } from '@fairgate/scheduler';

/**
 * OpenAI's rate-limit headers from a tenant's standing after its enqueue (docs/tenants.md,
 * *Budgets and rates*): limit, remaining and reset, for requests (the tenant's
 * requests_per_minute) and for tokens (the tighter of tokens_per_day and tokens_per_month).
 * The reset is the time until the window ends, in OpenAI's format (`6m0s`, `8.64s`, `20ms`).
 */
export function rateLimitHeaders(standing: LimitsStanding): Record<string, string> {
  // Requests that take recycled slots share their tenant's latest standing: made once.
  let headers = rendered.get(standing);
  if (headers) return headers;
  headers = {};
  add(headers, REQUEST_HEADERS, standing.requests);
  add(headers, TOKEN_HEADERS, standing.tokens);
  rendered.set(standing, headers);
  return headers;
}

const rendered = new WeakMap<LimitsStanding, Record<string, string>>();
const REQUEST_HEADERS = [
  'x-ratelimit-limit-requests',
  'x-ratelimit-remaining-requests',
  'x-ratelimit-reset-requests',
] as const;
const TOKEN_HEADERS = [
  'x-ratelimit-limit-tokens',
  'x-ratelimit-remaining-tokens',
  'x-ratelimit-reset-tokens',
] as const;

function add(
  headers: Record<string, string>,
  [limitName, remainingName, resetName]: readonly [string, string, string],
  limit: LimitStanding | null,
): void {
  if (!limit) return;
  headers[limitName] = String(limit.limit);
  headers[remainingName] = String(limit.remaining);
  headers[resetName] = formatDuration(limit.resetMs);
}

/** A duration as Go prints one (OpenAI's headers do): `20ms`, `8.64s`, `6m0s`, `17h3m0.5s`. */
export function formatDuration(ms: number): string {
  const whole = Math.max(0, Math.round(ms));
  if (whole < 1_000) return `${whole}ms`;
  const hours = Math.floor(whole / 3_600_000);
  const minutes = Math.floor((whole % 3_600_000) / 60_000);
  const seconds = (whole % 60_000) / 1_000;
  const secondsText = `${Number(seconds.toFixed(3))}s`;
  if (hours > 0) return `${hours}h${minutes}m${secondsText}`;
  if (minutes > 0) return `${minutes}m${secondsText}`;
  return secondsText;
}

/** The message of a refusal by the tenant's budget or rate, naming the limit and its end. */
export function limitMessage(
  tenant: TenantConfig,
  limit: 'requests' | 'tokens',
  retryAfterMs: number | undefined,
  nowMs: number,
): string {
  // Every window ends on a whole minute: rounding takes out the clocks' skew and the trip.
  const resets =
    retryAfterMs === undefined
      ? ''
      : new Date(Math.round((nowMs + retryAfterMs) / 60_000) * 60_000).toISOString();
  if (limit === 'requests') {
    return `Tenant '${tenant.id}' has made its ${tenant.limits?.requests_per_minute} requests of this minute; the next minute starts at ${resets}`;
  }
  const { tokens_per_day: day, tokens_per_month: month } = tenant.limits ?? {};
  const spent = [
    ...(day !== undefined ? [`${day} tokens per day`] : []),
    ...(month !== undefined ? [`${month} tokens per month`] : []),
  ].join(', ');
  return `Tenant '${tenant.id}' has spent its token budget (${spent}); it renews at ${resets}`;
}
