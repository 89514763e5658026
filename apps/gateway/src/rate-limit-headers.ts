import type { TenantConfig } from '@fairgate/config';
import type { LimitsStanding } from '@fairgate/scheduler';

/**
 * OpenAI's rate-limit headers from a tenant's standing after its enqueue (docs/tenants.md,
 * *Budgets and rates*): limit, remaining and reset, for requests (the tenant's
 * requests_per_minute) and for tokens (the tighter of tokens_per_day and tokens_per_month).
 * The reset is the time until the window ends, in OpenAI's format (`6m0s`, `8.64s`, `20ms`).
 */
export function rateLimitHeaders(standing: LimitsStanding): Record<string, string> {
  // Requests that take recycled slots share their tenant's latest standing: made once.
  if (standing === last.standing) return last.headers;
  const headers: Record<string, string> = {};
  const { requests, tokens } = standing;
  if (requests) {
    headers['x-ratelimit-limit-requests'] = `${requests.limit}`;
    headers['x-ratelimit-remaining-requests'] = `${requests.remaining}`;
    headers['x-ratelimit-reset-requests'] = formatDuration(requests.resetMs);
  }
  if (tokens) {
    headers['x-ratelimit-limit-tokens'] = `${tokens.limit}`;
    headers['x-ratelimit-remaining-tokens'] = `${tokens.remaining}`;
    headers['x-ratelimit-reset-tokens'] = formatDuration(tokens.resetMs);
  }
  last = { standing, headers };
  return headers;
}

/** The standing made last, and its headers. */
let last: { standing?: LimitsStanding; headers: Record<string, string> } = { headers: {} };

/** A duration as Go prints one (OpenAI's headers do): `20ms`, `8.64s`, `6m0s`, `17h3m0.5s`. */
export function formatDuration(ms: number): string {
  const whole = Math.max(0, Math.round(ms));
  if (whole < 1_000) return `${whole}ms`;
  const hours = Math.floor(whole / 3_600_000);
  const minutes = Math.floor((whole % 3_600_000) / 60_000);
  const millis = whole % 1_000;
  // Go's fraction: the milliseconds without their trailing zeros.
  const digits = String(millis + 1_000)
    .slice(1)
    .replace(/0+$/, '');
  const fraction = millis === 0 ? '' : `.${digits}`;
  const seconds = `${Math.floor((whole % 60_000) / 1_000)}${fraction}s`;
  if (hours > 0) return `${hours}h${minutes}m${seconds}`;
  if (minutes > 0) return `${minutes}m${seconds}`;
  return seconds;
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
