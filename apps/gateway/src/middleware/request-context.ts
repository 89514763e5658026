import { OpenAIHttpError } from '@fairgate/openai';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { MiddlewareHandler } from 'hono';
import { nodeExchange, requestHeader } from '../body.js';
import type { RequestState } from '../context.js';
import { internalError, schedulerUnavailable } from '../errors.js';
import { SchedulerUnavailable } from '../redis-outage.js';
import { flatUuid } from '../uuid.js';

export const REQUEST_ID_HEADER = 'x-request-id';
export const QUEUE_MS_HEADER = 'x-fairgate-queue-ms';

const acceptableId = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * Stamps t1 and the request id (the client's x-request-id when it is a sane
 * token, else a new UUID), and makes every response — errors included — carry
 * x-request-id and x-fairgate-queue-ms (0 unless the request waited). Handlers
 * that write to the Node response directly (request/pipeline.ts) set them
 * themselves and return RESPONSE_ALREADY_SENT.
 */
export function requestContext(): MiddlewareHandler {
  return async function requestContextMiddleware(c, next) {
    const t1 = performance.now();
    const requestId = requestIdFrom(requestHeader(c, nodeExchange(c), REQUEST_ID_HEADER));
    c.set('request', { requestId, t1 });
    await next();
    // A handler that wrote its response to the Node socket itself set both headers there.
    if (c.res === RESPONSE_ALREADY_SENT) return;
    c.res.headers.set(REQUEST_ID_HEADER, requestId);
    // A limited tenant's error answers carry its rate-limit headers too (the relay writes
    // them on the answers it writes itself).
    for (const [name, value] of Object.entries(c.get('request').rateLimitHeaders ?? {})) {
      if (!c.res.headers.has(name)) c.res.headers.set(name, value);
    }
    if (!c.res.headers.has(QUEUE_MS_HEADER)) c.res.headers.set(QUEUE_MS_HEADER, '0');
  };
}

/** The client's x-request-id when it is a sane token, else a new UUID. */
export function requestIdFrom(header: string | undefined): string {
  return header && acceptableId.test(header) ? header : flatUuid();
}

/**
 * Any thrown error as the gateway's answer: an OpenAIHttpError as is, anything else a 500
 * (logged, being a bug).
 */
export function httpErrorOf(error: unknown, log: (line: string) => void): OpenAIHttpError {
  if (error instanceof OpenAIHttpError) return error;
  // Any route that needed Redis while it is away (/admin/state, a release path...).
  if (error instanceof SchedulerUnavailable) return schedulerUnavailable();
  log(`fairgate: unhandled error: ${describeError(error)}`);
  return internalError();
}

/** An error's stack when it has one (for the log), else its text. */
export function describeError(error: unknown): string {
  return error instanceof Error && error.stack ? error.stack : String(error);
}

/**
 * The error response of a request handled outside Hono (app.ts's Node fast
 * path): the same status, OpenAI error body and headers as app.onError plus
 * this middleware produce.
 */
export function errorResponse(
  error: unknown,
  state: RequestState,
  log: (line: string) => void,
): Response {
  const failure = httpErrorOf(error, log);
  return new Response(JSON.stringify(failure.toBody()), {
    status: failure.status,
    headers: {
      'content-type': 'application/json',
      ...state.rateLimitHeaders,
      ...failure.headers,
      [REQUEST_ID_HEADER]: state.requestId,
      [QUEUE_MS_HEADER]: failure.headers[QUEUE_MS_HEADER] ?? '0',
    },
  });
}
