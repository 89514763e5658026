import type { ServerResponse } from 'node:http';
import { DROP_REASON_HEADER } from '@fairgate/core';
import { type ApiEndpoint, ENDPOINTS, OpenAIHttpError } from '@fairgate/openai';
import {
  Attr,
  endSpan,
  SpanKind,
  SpanNames,
  startChildSpan,
  startServerSpan,
} from '@fairgate/telemetry';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { Span } from '@opentelemetry/api';
import type { Context } from 'hono';
import { type NodeExchange, nodeExchange, nodeHeader } from '../body.js';
import type { GatewayDeps, RequestState } from '../context.js';
import { batchCancelled, CLIENT_GONE_STATUS } from '../errors.js';
import {
  describeError,
  errorResponse,
  REQUEST_ID_HEADER,
  requestIdFrom,
} from '../middleware/request-context.js';
import { HeldSlot } from '../slot/held-slot.js';
import { admit } from './admit.js';
import { serveDirect } from './direct.js';
import { finish } from './finalize.js';
import { forward } from './forward.js';
import { type Arrival, type Call, receive } from './receive.js';
import { relay } from './relay.js';
import { ClientGone, type Granted, waitForGrant } from './wait-for-grant.js';

/**
 * POST /v1/chat/completions and /v1/completions: the request lifecycle t1..t7 of
 * docs/architecture.md, as a pipeline of stages, one file each, run in this order and
 * none calling back into an earlier one:
 *
 *   receive.ts         t1  authenticate, read and validate the body, classify
 *   admit.ts               enqueue: granted, queued or refused
 *   wait-for-grant.ts  t2  the grant (a queued request waits in the GrantBroker)
 *   slot/held-slot.ts      HeldSlot: from the grant on, the request holds its slot ...
 *   forward.ts         t3  the request on its pod (retried before the first byte)
 *   relay.ts           t6  the pod's answer to the client (a stream as its bytes come);
 *                          the slot is released once the pod is done (HeldSlot.release)
 *   finalize.ts        t7  ... until `finish` counts the one terminal outcome (and
 *                          releases, when the relay did not)
 *
 * Every admitted request ends in exactly one release (completed, cancelled, evicted or
 * upstream_error) unless the scheduler ended it first (expired / reclaimed), which
 * release treats as a no-op. Responses are written straight to the Node response (the
 * gateway runs on @hono/node-server); the handlers return RESPONSE_ALREADY_SENT.
 */
export function generationHandler(deps: GatewayDeps, endpoint: ApiEndpoint) {
  const route = ENDPOINTS[endpoint].path;
  return function generation(c: Context): Promise<Response> {
    const node = nodeExchange(c);
    if (!node) throw new Error('the generation endpoints are served on a Node HTTP server only');
    return generate(deps, endpoint, route, c.get('request'), node);
  };
}

/**
 * The same endpoint straight on the Node request and response, for app.ts to call before
 * Hono routes anything (exact POST paths only): no Hono context, middleware chain or web
 * Request. It does the request-context middleware's part itself (t1, request id), renders
 * errors as app.onError does and writes the answer itself. Its one pair of settle
 * callbacks is all a waiting request holds beyond `generate` (each promise layer more is a
 * closure, its context, a promise and a reaction per waiting request: bench:waiting).
 */
export function nodeGenerationHandler(deps: GatewayDeps, endpoint: ApiEndpoint) {
  const route = ENDPOINTS[endpoint].path;
  return function nodeGeneration(node: NodeExchange): void {
    const state: RequestState = {
      requestId: requestIdFrom(nodeHeader(node.incoming, REQUEST_ID_HEADER)),
      t1: performance.now(),
      // Set by the enqueue for a limited tenant; present from the start (one object shape).
      rateLimitHeaders: undefined,
    };
    void generate(deps, endpoint, route, state, node).then(
      (response) => writeAnswer(deps, node.outgoing, response),
      (error: unknown) => {
        if (node.outgoing.headersSent) {
          // Failed after the answer was written (bookkeeping): nothing more to send.
          deps.log(`fairgate: error after the response was sent: ${describeError(error)}`);
          return;
        }
        return writeAnswer(deps, node.outgoing, () => errorResponse(error, state, deps.log));
      },
    );
  };
}

/**
 * Writes a web Response the pipeline returned instead of writing its answer (errors, a gone
 * client), or the one `answer` renders. Never rejects.
 */
async function writeAnswer(
  deps: GatewayDeps,
  outgoing: ServerResponse,
  answer: Response | (() => Response),
): Promise<void> {
  if (answer === RESPONSE_ALREADY_SENT) return;
  try {
    const response = typeof answer === 'function' ? answer() : answer;
    const body = response.body ? Buffer.from(await response.arrayBuffer()) : undefined;
    const headers: Record<string, string> = {};
    response.headers.forEach((value, name) => {
      headers[name] = value;
    });
    outgoing.writeHead(response.status, headers);
    outgoing.end(body);
  } catch (error) {
    // The answer could not be written (a bug): logged, and the client is never left hanging.
    deps.log(`fairgate: generation request failed: ${describeError(error)}`);
    if (!outgoing.headersSent) outgoing.writeHead(500);
    outgoing.end();
  }
}

async function generate(
  deps: GatewayDeps,
  endpoint: ApiEndpoint,
  route: string,
  state: RequestState,
  node: NodeExchange,
): Promise<Response> {
  // A draining replica refuses here (503 draining, before auth: the client retries
  // elsewhere); an admitted request leaves when it ends, in finish (finalize.ts) or below.
  const ticket = deps.drain.enter();
  const server = startServerSpan(deps.tracer, 'POST', route, {
    traceparent: nodeHeader(node.incoming, 'traceparent'),
    tracestate: nodeHeader(node.incoming, 'tracestate'),
  });
  server.span.setAttribute(Attr.replica, deps.replica);
  server.span.setAttribute(Attr.requestId, state.requestId);
  const arrival: Arrival = { endpoint, route, state, node, span: server.span, ctx: server.ctx };

  let call: Call | undefined;
  let granted: Granted;
  let queued: Span | undefined;
  try {
    call = await receive(deps, arrival);
    if (ENDPOINTS[endpoint].kind === 'direct') return await serveDirect(call, ticket, server.span);
    // Stages 2 and 3 under the queue span (t1 -> t2).
    queued = startChildSpan(deps.tracer, call.ctx, SpanNames.queue, SpanKind.INTERNAL, {
      [Attr.tenant]: call.tenant.id,
      [Attr.sloClass]: call.cls.sloClass,
    }).span;
    granted = await waitForGrant(call, await admit(deps, call));
    queued.setAttribute(Attr.pod, granted.pod);
    endSpan(queued);
  } catch (error) {
    if (queued) {
      countDrop(call!, queued, error);
      endSpan(queued);
    }
    ticket.leave();
    if (error instanceof ClientGone) {
      // Cancelled in the scheduler already (the leave listener); nobody reads this.
      endSpan(server.span, { status: CLIENT_GONE_STATUS });
      return clientGone(state);
    }
    const status = error instanceof OpenAIHttpError ? error.status : 500;
    endSpan(server.span, { status, ...(status >= 500 ? { error } : {}) });
    throw error;
  }

  const held = new HeldSlot(call, granted, ticket);
  if (call.batch !== undefined && !(await deps.batches?.running(call.batch))) {
    // A line of a batch cancelled while it waited: it never reaches a pod (docs/batch.md).
    finish(held, 'cancelled', undefined, 409);
    throw batchCancelled(call.batch);
  }
  if (call.adapter !== undefined && call.pool.config().routing.lora_load === 'on') {
    // The pod loads the adapter before it gets the request (docs/routing.md, *LoRA adapters*).
    await call.pool.adapters.ensure(granted.pod, call.adapter);
  }
  const forwarded = await forward(deps, call, granted.pod, held);
  if (!forwarded.ok) {
    finish(held, forwarded.outcome, undefined, forwarded.status, forwarded.error);
    if (forwarded.answer) throw forwarded.answer;
    return clientGone(state);
  }
  const { upstream } = forwarded;
  if (call.adapter !== undefined && upstream.kind === 'json' && upstream.status === 404) {
    // The pod does not hold the adapter after all (docs/routing.md, *LoRA adapters*).
    void call.pool.adapters.missing(forwarded.pod.config.name, call.adapter);
  }
  try {
    const relayed = await relay(deps, call, held, forwarded);
    finish(held, relayed.outcome, relayed.usage, relayed.status, relayed.error);
  } catch (error) {
    // Writing the answer failed (e.g. a header value Node refuses): the pod's exchange is
    // aborted (a stream's connection is freed) and the request still ends in one release.
    held.abort.abort(error instanceof Error ? error : new Error(String(error)));
    finish(held, 'upstream_error', undefined, 502, error);
    throw error;
  } finally {
    forwarded.pod.inflight--;
  }
  return RESPONSE_ALREADY_SENT;
}

/** A drop by flow control or admission, counted with its reason (metric and queue span). */
function countDrop(call: Call, span: Span, error: unknown): void {
  const reason =
    error instanceof OpenAIHttpError ? (error.headers[DROP_REASON_HEADER] ?? error.code) : null;
  if (!reason) return;
  call.pool.metrics.drops.inc({ ...call.series.labels, reason });
  span.setAttribute(Attr.dropReason, reason);
}

/** The answer nobody reads: the client left. */
function clientGone(state: RequestState): Response {
  return new Response(null, {
    status: CLIENT_GONE_STATUS,
    headers: { [REQUEST_ID_HEADER]: state.requestId },
  });
}
