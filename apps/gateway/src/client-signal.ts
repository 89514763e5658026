import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Context } from 'hono';

/**
 * An AbortSignal that fires when the client goes away before its response was
 * fully written. Under @hono/node-server it listens to the Node response's
 * 'close' directly: reading `c.req.raw.signal` would make node-server build a
 * full web Request for every call, which is measurable on the hot path. Under
 * app.request() (tests without a socket) it falls back to the Request's signal.
 */
export function clientAbortSignal(c: Context): AbortSignal {
  const env = c.env as { incoming?: IncomingMessage; outgoing?: ServerResponse } | undefined;
  const outgoing = env?.outgoing;
  if (!outgoing) return c.req.raw.signal;
  const controller = new AbortController();
  const onClose = () => {
    if (!outgoing.writableFinished) controller.abort(new Error('client closed the connection'));
  };
  outgoing.once('close', onClose);
  return controller.signal;
}
