import { randomUUID } from 'node:crypto';
import type { MiddlewareHandler } from 'hono';

export const REQUEST_ID_HEADER = 'x-request-id';
export const QUEUE_MS_HEADER = 'x-fairgate-queue-ms';

const acceptableId = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * Stamps t1 and the request id (the client's x-request-id when it is a sane
 * token, else a new UUID), and makes every response — errors included — carry
 * x-request-id and x-fairgate-queue-ms (0 unless the request waited).
 */
export function requestContext(): MiddlewareHandler {
  return async function requestContextMiddleware(c, next) {
    const t1 = performance.now();
    const incoming = c.req.header(REQUEST_ID_HEADER);
    const requestId = incoming && acceptableId.test(incoming) ? incoming : randomUUID();
    c.set('request', { requestId, t1 });
    await next();
    c.res.headers.set(REQUEST_ID_HEADER, requestId);
    if (!c.res.headers.has(QUEUE_MS_HEADER)) c.res.headers.set(QUEUE_MS_HEADER, '0');
  };
}
