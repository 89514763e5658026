import {
  type DropNotice,
  noticeDropCode,
  type OutcomeCode,
  type OutcomeOptions,
  outcomeAnswer,
  RejectCode,
} from '@fairgate/core';
import { OpenAIHttpError } from '@fairgate/openai';

/**
 * Every failure the gateway answers with is an OpenAIHttpError (status, OpenAI
 * error body, extra headers); one onError handler renders it. These factories are the
 * only place statuses and error types are chosen; a drop's, an unavailability's and a
 * pod failure's come from core's outcome table (packages/core/src/outcome-table.ts).
 */

/** The answer to a request ended with an outcome-table code (a drop, a 503, a pod failure). */
export function outcomeError(code: OutcomeCode, options: OutcomeOptions = {}): OpenAIHttpError {
  return new OpenAIHttpError(outcomeAnswer(code, options));
}

/** The drop a scheduler notice ends a waiting or in-flight request with. */
export function noticeDrop(kind: DropNotice): OpenAIHttpError {
  return outcomeError(noticeDropCode(kind));
}

export function unauthorized(message: string): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 401,
    type: 'authentication_error',
    message,
    code: 'invalid_api_key',
  });
}

export function notFound(path: string): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 404,
    type: 'invalid_request_error',
    message: `Unknown route: ${path}`,
    code: 'unknown_url',
  });
}

/** The model is served by no pool, or the tenant may not use it (OpenAI answers both alike). */
export function modelNotFound(model: string): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 404,
    type: 'invalid_request_error',
    message: `The model \`${model}\` does not exist or you do not have access to it.`,
    param: 'model',
    code: 'model_not_found',
  });
}

export function payloadTooLarge(limit: number): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 413,
    type: 'invalid_request_error',
    message: `Request body exceeds the limit of ${limit} bytes`,
    code: 'payload_too_large',
  });
}

export function badRequest(
  message: string,
  param: string | null = null,
  code = 'invalid_value',
): OpenAIHttpError {
  return new OpenAIHttpError({ status: 400, type: 'invalid_request_error', message, param, code });
}

export function noHealthyPod(): OpenAIHttpError {
  return outcomeError(RejectCode.NoHealthyPod);
}

/**
 * Redis (the shared scheduler state) cannot be reached and this replica's outage mode is
 * `reject` (or its local share has no view of the pool yet): answered at once, nothing
 * sent upstream.
 */
export function schedulerUnavailable(): OpenAIHttpError {
  return outcomeError('scheduler_unavailable');
}

/**
 * This replica is shutting down (SIGTERM): a new request, or a queued one handed back, is
 * refused so that the client retries on another replica (nothing was sent upstream).
 * `connection: close` makes a keep-alive client reconnect, through its balancer, elsewhere.
 */
export function draining(message?: string): OpenAIHttpError {
  return outcomeError('draining', message === undefined ? {} : { message });
}

/** A pod failed (502); mid-stream, `upstream_reset` or `upstream_truncated`. */
export function upstreamFailure(
  message: string,
  code: 'upstream_error' | 'upstream_reset' | 'upstream_truncated' = 'upstream_error',
): OpenAIHttpError {
  return outcomeError(code, { message });
}

export function upstreamTimeout(message: string): OpenAIHttpError {
  return outcomeError('upstream_timeout', { message });
}

export function internalError(message = 'Internal gateway error'): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 500,
    type: 'server_error',
    message,
    code: 'internal_error',
  });
}

/**
 * The status recorded (metrics, spans) for a request whose client left before the answer
 * (nginx's 499): nothing is sent, nobody reads it.
 */
export const CLIENT_GONE_STATUS = 499;

/** Requests Node's HTTP parser refuses before any handler runs (server-errors.ts). */
export function headersTooLarge(): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 431,
    type: 'invalid_request_error',
    message: 'Request headers are too large',
    code: 'headers_too_large',
  });
}

export function malformedRequest(detail: string): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 400,
    type: 'invalid_request_error',
    message: `Malformed HTTP request: ${detail}`,
    code: 'malformed_request',
  });
}

/** A client too slow to send its request (server.headers_timeout_ms / request_timeout_ms). */
export function requestTimeout(): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 408,
    type: 'invalid_request_error',
    message: 'The request was not received in time',
    code: 'request_timeout',
  });
}

export function adminUnauthorized(): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 401,
    type: 'authentication_error',
    message: 'Admin endpoints need `Authorization: Bearer <admin token>`',
    code: 'invalid_admin_token',
  });
}

/** A Batch API object (file, batch) that does not exist or belongs to another tenant. */
export function noSuchObject(kind: 'File' | 'Batch', id: string): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 404,
    type: 'invalid_request_error',
    message: `No such ${kind} object: ${id}`,
    param: 'id',
    code: 'not_found',
  });
}

/** The Batch API needs `redis:` (its files, batches and queues live there). */
export function batchUnavailable(): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 501,
    type: 'invalid_request_error',
    message: 'The Batch API needs a shared Redis (config `redis:`); this gateway runs embedded',
    code: 'batch_unavailable',
  });
}

/** An upload past `batch.max_file_bytes` (413) or the tenant's `batch.max_tenant_bytes` (429). */
export function fileRefused(kind: 'file_too_large' | 'tenant_quota_exceeded', message: string) {
  return new OpenAIHttpError({
    status: kind === 'file_too_large' ? 413 : 429,
    type: 'invalid_request_error',
    message,
    code: kind,
  });
}

/** A batch line granted after its batch was cancelled (the worker counts it as skipped). */
export function batchCancelled(batch: string): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 409,
    type: 'invalid_request_error',
    message: `Batch ${batch} was cancelled before this line ran`,
    code: 'batch_cancelled',
  });
}

/** The tenant admin API on the embedded scheduler: run-time tenants live in Redis. */
export function tenancyUnavailable(): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 501,
    type: 'invalid_request_error',
    message:
      'Run-time tenants and keys need a shared Redis (config `redis:`); this gateway runs embedded',
    code: 'tenants_unavailable',
  });
}

/** A tenant or key the admin API does not have. */
export function noSuchTenantObject(kind: 'tenant' | 'key', id: string): OpenAIHttpError {
  return new OpenAIHttpError({
    status: 404,
    type: 'invalid_request_error',
    message: `No such ${kind}: ${id}`,
    param: 'id',
    code: `${kind}_not_found`,
  });
}

/** A write the admin API refuses as it stands (the id is taken, the tenant is the file's). */
export function tenantConflict(code: 'tenant_exists' | 'tenant_in_config_file', message: string) {
  return new OpenAIHttpError({ status: 409, type: 'invalid_request_error', message, code });
}
