import { randomUUID } from 'node:crypto';
import type { TenantConfig } from '@fairgate/config';
import {
  isSheddablePriority,
  RejectCode,
  type ReleaseOutcome,
  rejectionResponse,
} from '@fairgate/core';
import {
  ENDPOINT_PATHS,
  type Endpoint,
  type GenerationRequest,
  OpenAIHttpError,
  parseGenerationRequest,
  parseJsonBody,
  type Usage,
} from '@fairgate/openai';
import { ClientLink } from '@fairgate/runtime';
import type { EnqueueRequest, EnqueueResult } from '@fairgate/scheduler';
import {
  Attr,
  addSpanEvent,
  endSpan,
  SpanEvents,
  SpanKind,
  SpanNames,
  startChildSpan,
  startServerSpan,
  traceHeaders,
} from '@fairgate/telemetry';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { Context as OtelContext, Span } from '@opentelemetry/api';
import type { Context } from 'hono';
import {
  type NodeExchange,
  nodeExchange,
  nodeHeader,
  readBodyText,
  readRequestBody,
  requestHeader,
} from '../body.js';
import {
  actualBucketTokens,
  type Classification,
  classify,
  SLO_CLASS_HEADER,
  SLO_TTFT_HEADER,
} from '../classify.js';
import { DEFAULT_MAX_TOKENS, type GatewayDeps, type Lane, type RequestState } from '../context.js';
import { DrainAborted, type DrainTicket } from '../drain.js';
import {
  CLIENT_GONE_STATUS,
  draining,
  flowControlDrop,
  noHealthyPod,
  noticeDrop,
  schedulerUnavailable,
  unauthorized,
  upstreamFailure,
  upstreamTimeout,
} from '../errors.js';
import { EvictedError } from '../grants.js';
import {
  describeError,
  errorResponse,
  QUEUE_MS_HEADER,
  REQUEST_ID_HEADER,
  requestIdFrom,
} from '../middleware/request-context.js';
import { SchedulerUnavailable } from '../redis-outage.js';
import { bearerToken } from '../tenants.js';
import type { PodState } from '../upstream/pods.js';
import { callUpstream, type UpstreamResponse, UpstreamUnavailable } from '../upstream/proxy.js';
import type { SlotAbort } from '../upstream/slot-abort.js';

/**
 * POST /v1/chat/completions and /v1/completions: the request lifecycle
 * t1..t7 of docs/architecture.md. Every admitted request ends in exactly one
 * release (completed, cancelled, evicted or upstream_error) unless the
 * scheduler ended it first (expired / reclaimed), which release treats as a
 * no-op.
 */
export function generationHandler(deps: GatewayDeps, endpoint: Endpoint) {
  const route = ENDPOINT_PATHS[endpoint];
  return function generation(c: Context): Promise<Response> {
    const node = nodeExchange(c);
    return generate(deps, endpoint, route, {
      state: c.get('request'),
      node,
      header: (name) => requestHeader(c, node, name),
      readBody: (limit) => readRequestBody(c, limit, node),
      webSignal: () => c.req.raw.signal,
    });
  };
}

/**
 * The same endpoint straight on the Node request and response, for app.ts to
 * call before Hono routes anything (exact POST paths only): no Hono context,
 * middleware chain or web Request. It does the request-context middleware's
 * part itself (t1, request id) and renders errors as app.onError does.
 */
export function nodeGenerationHandler(deps: GatewayDeps, endpoint: Endpoint) {
  const route = ENDPOINT_PATHS[endpoint];
  return async function nodeGeneration(node: NodeExchange): Promise<Response> {
    const state: RequestState = {
      requestId: requestIdFrom(nodeHeader(node.incoming, REQUEST_ID_HEADER)),
      t1: performance.now(),
    };
    try {
      return await generate(deps, endpoint, route, {
        state,
        node,
        header: (name) => nodeHeader(node.incoming, name),
        readBody: (limit) => readBodyText(node.incoming, limit),
        webSignal: () => {
          throw new Error('a Node request has no web signal');
        },
      });
    } catch (error) {
      if (node.outgoing.headersSent) {
        // Failed after the answer was written (bookkeeping): nothing more to send.
        deps.log(`fairgate: error after the response was sent: ${describeError(error)}`);
        return RESPONSE_ALREADY_SENT;
      }
      return errorResponse(error, state.requestId, deps.log);
    }
  };
}

/** What a generation request needs from the HTTP layer (Node, or a Hono context). */
interface RequestIo {
  readonly state: RequestState;
  /** The Node request/response, when there is a socket (responses are written to it). */
  readonly node: NodeExchange | undefined;
  /** A request header by lower-case name, web Headers semantics. */
  header(name: string): string | undefined;
  readBody(limit: number): Promise<string>;
  /** The web Request's abort signal; used only without `node`. */
  webSignal(): AbortSignal;
}

async function generate(
  deps: GatewayDeps,
  endpoint: Endpoint,
  route: string,
  io: RequestIo,
): Promise<Response> {
  // A draining replica refuses here (503 draining, before auth: the client retries
  // elsewhere); an admitted request leaves when it ends, in serve's finish or below.
  const ticket = deps.drain.enter();
  const headers: Record<string, string | undefined> = {
    traceparent: io.header('traceparent'),
    tracestate: io.header('tracestate'),
  };
  const server = startServerSpan(deps.tracer, 'POST', route, headers);
  server.span.setAttribute(Attr.replica, deps.replica);
  server.span.setAttribute(Attr.requestId, io.state.requestId);
  try {
    return await serve(deps, io, endpoint, route, server.span, server.ctx, ticket);
  } catch (error) {
    ticket.leave();
    const status = error instanceof OpenAIHttpError ? error.status : 500;
    endSpan(server.span, { status, ...(status >= 500 ? { error } : {}) });
    throw error;
  }
}

function authenticate(deps: GatewayDeps, io: RequestIo): TenantConfig {
  const token = bearerToken(io.header('authorization'));
  if (!token) throw unauthorized('Missing `Authorization: Bearer <API key>` header');
  const tenant = deps.tenants().authenticate(token);
  if (!tenant) throw unauthorized('Incorrect API key provided');
  return tenant;
}

/** The client left while its request waited for a grant: the wait ends, nothing is sent. */
class ClientGone extends Error {
  constructor() {
    super('the client closed the connection while its request waited');
    this.name = 'ClientGone';
  }
}

async function serve(
  deps: GatewayDeps,
  io: RequestIo,
  endpoint: Endpoint,
  route: string,
  serverSpan: Span,
  serverCtx: OtelContext,
  ticket: DrainTicket,
): Promise<Response> {
  const { state, node } = io;
  const config = deps.config();
  // On Node one 'close' listener on the response (cheaper than an AbortController per
  // request; reading `c.req.raw.signal` would also make node-server build a full web
  // Request); under app.request() the web Request's signal.
  const clientLink = io.node
    ? ClientLink.ofResponse(io.node.outgoing)
    : ClientLink.ofSignal(io.webSignal());
  const tenant = authenticate(deps, io);
  serverSpan.setAttribute(Attr.tenant, tenant.id);
  const request = parseGenerationRequest(
    endpoint,
    parseJsonBody(await io.readBody(config.limits.max_body_bytes)),
  );
  const nowMs = Date.now();
  const cls = classify({
    tenant,
    sloClasses: config.slo_classes,
    sloTargetsMs: config.scheduler.slo_targets_ms,
    request,
    classHeader: io.header(SLO_CLASS_HEADER),
    ttftHeader: io.header(SLO_TTFT_HEADER),
    nowMs,
    blockSize: config.scheduler.kv_block_size,
    defaultMaxTokens: DEFAULT_MAX_TOKENS,
  });
  serverSpan.setAttributes({
    [Attr.sloClass]: cls.sloClass,
    [Attr.requestModel]: request.model,
    [Attr.operationName]: endpoint === 'chat' ? 'chat' : 'text_completion',
  });
  const labels = { tenant: tenant.id, class: cls.sloClass };

  // t1 -> t2: admission and the queue.
  const schedulerId = randomUUID();
  const queue = startChildSpan(deps.tracer, serverCtx, SpanNames.queue, SpanKind.INTERNAL, {
    [Attr.tenant]: tenant.id,
    [Attr.sloClass]: cls.sloClass,
  });
  let admitted: Admitted;
  try {
    admitted = await acquire(deps, schedulerId, tenant, cls, nowMs, clientLink);
  } catch (error) {
    const reason =
      error instanceof OpenAIHttpError
        ? (error.headers['x-fairgate-drop-reason'] ?? error.code)
        : null;
    if (reason) {
      deps.metrics.drops.inc({ ...labels, reason });
      queue.span.setAttribute(Attr.dropReason, reason);
    }
    endSpan(queue.span);
    if (error instanceof ClientGone) {
      // Cancelled in the scheduler already (the leave listener); nobody reads this.
      ticket.leave();
      endSpan(serverSpan, { status: CLIENT_GONE_STATUS });
      return new Response(null, {
        status: CLIENT_GONE_STATUS,
        headers: { [REQUEST_ID_HEADER]: state.requestId },
      });
    }
    throw error;
  }
  const { pod, lane } = admitted;
  const t2 = performance.now();
  const queueMs = t2 - state.t1;
  deps.metrics.queueWait.observe(labels, queueMs / 1_000);
  queue.span.setAttribute(Attr.pod, pod);
  endSpan(queue.span);
  serverSpan.setAttributes({ [Attr.pod]: pod, [Attr.queueMs]: queueMs });
  const queueHeader = queueMs.toFixed(1);

  // t3 .. t6: upstream, holding the slot.
  const slot = lane.broker.track(schedulerId, pod, admitted.request);
  ticket.hold(slot);
  const stopAbortOnLeave = clientLink.onLeave(() =>
    slot.abort(new Error('client closed the connection')),
  );
  deps.metrics.inflight.inc();
  let released = false;
  const finish = (
    outcome: ReleaseOutcome,
    usage: Usage | undefined,
    status: number,
    error?: unknown,
  ) => {
    if (released) return;
    released = true;
    ticket.leave();
    stopAbortOnLeave();
    lane.broker.untrack(schedulerId);
    deps.metrics.inflight.dec();
    const evicted = outcome !== 'completed' && slot.reason instanceof EvictedError;
    const finalOutcome: ReleaseOutcome = evicted ? 'evicted' : outcome;
    void lane.scheduler
      .release(schedulerId, {
        outcome: finalOutcome,
        ...(usage
          ? {
              usage: { inputTokens: usage.prompt_tokens, outputTokens: usage.completion_tokens },
              ...(cls.bucketTokens > 0 ? { actualTokens: actualBucketTokens(tenant, usage) } : {}),
            }
          : {}),
      })
      .catch(() => deps.metrics.redisErrors.inc({ operation: 'release' }));
    deps.metrics.requests.inc({ ...labels, outcome: finalOutcome });
    const t7 = performance.now();
    deps.metrics.requestDuration.observe(labels, (t7 - state.t1) / 1_000);
    if (usage) {
      serverSpan.setAttributes({
        [Attr.inputTokens]: usage.prompt_tokens,
        [Attr.outputTokens]: usage.completion_tokens,
      });
    }
    serverSpan.setAttribute(Attr.outcome, finalOutcome);
    endSpan(serverSpan, { status, ...(error && status >= 500 ? { error } : {}) });
  };

  const onFirstToken = (client: Span) => () => {
    const t5 = performance.now();
    addSpanEvent(client, SpanEvents.firstToken);
    const ttftSeconds = (t5 - state.t1) / 1_000;
    deps.metrics.ttft.observe(labels, ttftSeconds);
    // The controller's signal: the same gateway TTFT, SLO-protected classes only.
    if (!isSheddablePriority(cls.priority)) {
      deps.control.recorder.recordTtft(ttftSeconds, queueMs / 1_000);
    }
  };

  let upstream: UpstreamResponse;
  let client: Span;
  try {
    ({ upstream, client } = await forward(
      deps,
      pod,
      route,
      request,
      serverCtx,
      slot,
      onFirstToken,
    ));
  } catch (error) {
    if (slot.reason instanceof EvictedError) {
      const drop = noticeDrop('evict');
      finish('evicted', undefined, drop.status);
      throw drop;
    }
    if (slot.reason instanceof DrainAborted) {
      const refusal = draining('This gateway replica shut down before the request finished; retry');
      finish('cancelled', undefined, refusal.status);
      throw refusal;
    }
    if (clientLink.gone) {
      finish('cancelled', undefined, CLIENT_GONE_STATUS);
      // Nobody reads it: the client is gone.
      return new Response(null, {
        status: CLIENT_GONE_STATUS,
        headers: { [REQUEST_ID_HEADER]: state.requestId },
      });
    }
    const failure = toHttpFailure(error);
    if (!isSheddablePriority(cls.priority) && isOverloadSignal(error)) {
      deps.control.recorder.recordFailure();
    }
    finish('upstream_error', undefined, failure.status, error);
    throw failure;
  }

  // While the replica drains, every answer closes its connection: a keep-alive client
  // then reconnects through its balancer to a replica that stays.
  if (node && deps.drain.draining) node.outgoing.shouldKeepAlive = false;
  if (upstream.kind === 'json') {
    if (node) {
      // Written here, in one writev, instead of through a web Response (see body.ts);
      // the bookkeeping (t6, t7: spans, metrics, release) follows the write.
      node.outgoing.writeHead(upstream.status, {
        'content-type': upstream.contentType,
        'content-length': Buffer.byteLength(upstream.text),
        [REQUEST_ID_HEADER]: state.requestId,
        [QUEUE_MS_HEADER]: queueHeader,
      });
      node.outgoing.end(upstream.text);
      endSpan(client, { status: upstream.status });
      finish('completed', upstream.usage, upstream.status);
      return RESPONSE_ALREADY_SENT;
    }
    endSpan(client, { status: upstream.status });
    finish('completed', upstream.usage, upstream.status);
    return new Response(upstream.text, {
      status: upstream.status,
      headers: { 'content-type': upstream.contentType, [QUEUE_MS_HEADER]: queueHeader },
    });
  }
  void upstream.end.then((end) => {
    endSpan(client, { status: 200, ...(end.error ? { error: end.error } : {}) });
    if (end.outcome === 'cancelled') slot.abort(new Error('client closed the connection'));
    finish(end.outcome, end.usage, 200, end.error);
  });
  return new Response(upstream.body, {
    status: 200,
    headers: {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      'x-accel-buffering': 'no',
      [REQUEST_ID_HEADER]: state.requestId,
      [QUEUE_MS_HEADER]: queueHeader,
    },
  });
}

interface Admitted {
  pod: string;
  lane: Lane;
  request: EnqueueRequest;
}

/**
 * Enqueue, then wait for the grant unless it came at once; cancels when the client leaves.
 * While Redis is unreachable the request goes to this replica's local share
 * (redis.on_outage: local_share) or is answered 503 scheduler_unavailable at once.
 */
async function acquire(
  deps: GatewayDeps,
  id: string,
  tenant: TenantConfig,
  cls: Classification,
  nowMs: number,
  clientLink: ClientLink,
): Promise<Admitted> {
  if (!deps.pods.hasHealthyPod()) throw noHealthyPod();
  const request: EnqueueRequest = {
    id,
    tenant: tenant.id,
    band: cls.priority,
    replica: deps.replica,
    sloClass: cls.sloClass,
    kvBlocks: cls.kvBlocks,
    ...(cls.bucketTokens > 0 ? { tokens: cls.bucketTokens } : {}),
    ...(cls.deadlineMs !== undefined ? { deadlineMs: Math.max(0, cls.deadlineMs - nowMs) } : {}),
  };
  const shared: Lane = { scheduler: deps.scheduler, broker: deps.broker };
  const lane = deps.outage?.down ? outageLane(deps) : shared;
  try {
    return await admit(deps, lane, request, tenant, cls, clientLink);
  } catch (error) {
    if (lane !== shared || !(error instanceof SchedulerUnavailable)) throw error;
    // Redis went away during this enqueue: the outage mode decides, as for the next request.
    return admit(deps, outageLane(deps), request, tenant, cls, clientLink);
  }
}

/** The lane of a request that arrives during an outage: the local share, or 503 at once. */
function outageLane(deps: GatewayDeps): Lane {
  const local = deps.outage?.localShare();
  if (!local) throw schedulerUnavailable();
  return local;
}

async function admit(
  deps: GatewayDeps,
  lane: Lane,
  request: EnqueueRequest,
  tenant: TenantConfig,
  cls: Classification,
  clientLink: ClientLink,
): Promise<Admitted> {
  const { id } = request;
  const grant = lane.broker.expect(id);
  let result: EnqueueResult;
  try {
    result = await lane.scheduler.enqueue(request);
  } catch (error) {
    lane.broker.forget(id);
    // A timed-out enqueue may still have run: cancel it (sent again once Redis is back).
    if (error instanceof SchedulerUnavailable && error.sent) {
      void lane.scheduler.cancel(id).catch(() => {});
    }
    throw error;
  }
  if (result.status !== 'queued') lane.broker.forget(id);
  if (result.status === 'granted') return { pod: result.pod, lane, request };
  if (result.status === 'rejected') {
    const drop = rejectionResponse(result.code);
    if (drop.status === 503) throw noHealthyPod();
    throw flowControlDrop(
      drop.dropReason,
      dropMessage(drop.dropReason, tenant.id, cls),
      result.code === RejectCode.RateLimited ? (result.retryAfterMs ?? null) : undefined,
    );
  }
  const stopCancelOnLeave = clientLink.onLeave(() => {
    lane.broker.forget(id, new ClientGone());
    void lane.scheduler
      .cancel(id)
      .catch(() => deps.metrics.redisErrors.inc({ operation: 'cancel' }));
  });
  try {
    deps.metrics.waiting.inc();
    return { pod: await lane.broker.waitForGrant(id, grant, request), lane, request };
  } finally {
    deps.metrics.waiting.dec();
    stopCancelOnLeave();
  }
}

function dropMessage(reason: string, tenant: string, cls: Classification): string {
  switch (reason) {
    case 'tenant_queue_full':
      return `Tenant '${tenant}' has too many requests waiting`;
    case 'band_full':
      return 'Too many requests of this priority are waiting';
    case 'global_queue_full':
      return 'The gateway queue is full';
    case 'quota_concurrency':
      return `Tenant '${tenant}' has no concurrency quota`;
    case 'quota_kv_blocks':
      return `The request needs more KV-cache blocks than tenant '${tenant}' may hold`;
    case 'rate_limited':
      return `Tenant '${tenant}' is over its token rate limit (this request costs ${cls.bucketTokens} tokens)`;
    case 'shed_by_tier':
      return `The pool is overloaded: class '${cls.sloClass}' is shed`;
    case 'saturated':
      return `The pool is saturated: sheddable class '${cls.sloClass}' is refused`;
    case 'rejected_by_policy':
      return 'The gateway admits no requests at the moment (admission policy reject-all)';
    default:
      return `Request dropped by flow control (${reason})`;
  }
}

/**
 * t3..t4: sends the request to the granted pod; a failure before the first
 * byte is retried once (upstream.retries) on another healthy pod while holding
 * the slot.
 */
async function forward(
  deps: GatewayDeps,
  podName: string,
  route: string,
  request: GenerationRequest,
  serverCtx: OtelContext,
  signal: SlotAbort,
  onFirstToken: (client: Span) => () => void,
): Promise<{ upstream: UpstreamResponse; client: Span }> {
  const config = deps.config();
  let pod: PodState | undefined = deps.pods.get(podName) ?? deps.pods.alternative(podName);
  const wantsUsage = request.stream_options?.include_usage === true;
  let lastError: unknown; // an Error captures a stack trace: only built when needed
  for (let attempt = 0; attempt <= config.upstream.retries && pod; attempt++) {
    const client = startChildSpan(
      deps.tracer,
      serverCtx,
      `chat ${request.model}`,
      SpanKind.CLIENT,
      {
        [Attr.requestModel]: request.model,
        [Attr.pod]: pod.config.name,
        [Attr.serverAddress]: pod.config.url,
      },
    );
    pod.inflight++;
    const current = pod;
    try {
      const upstream = await callUpstream(
        current,
        {
          path: route,
          body: request as Record<string, unknown>,
          stream: request.stream === true,
          headers: traceHeaders(client.ctx),
          signal,
        },
        wantsUsage,
        {
          onHeaders: (status) =>
            addSpanEvent(client.span, SpanEvents.upstreamHeaders, { [Attr.httpStatus]: status }),
          onFirstToken: onFirstToken(client.span),
        },
      );
      if (upstream.kind === 'json') current.inflight--;
      else void upstream.end.finally(() => current.inflight--);
      deps.pods.recordHealth(current.config.name, true);
      return { upstream, client: client.span };
    } catch (error) {
      current.inflight--;
      endSpan(client.span, { error });
      if (signal.aborted || !(error instanceof UpstreamUnavailable)) throw error;
      lastError = error;
      deps.metrics.upstreamErrors.inc({ pod: current.config.name, kind: error.kind });
      if (error.kind !== 'status') deps.pods.recordHealth(current.config.name, false);
      pod = deps.pods.alternative(current.config.name);
    }
  }
  throw lastError ?? new UpstreamUnavailable(`pod ${podName} is not configured`, 'connect');
}

/**
 * Upstream failures the controller counts as decrease signals: an error status (5xx, 429)
 * or a timeout. A refused connection or a reset says a pod is gone, which health checks
 * handle; less concurrency would not fix it.
 */
function isOverloadSignal(error: unknown): boolean {
  return (
    error instanceof UpstreamUnavailable && (error.kind === 'status' || error.kind === 'timeout')
  );
}

function toHttpFailure(error: unknown): OpenAIHttpError {
  if (error instanceof OpenAIHttpError) return error;
  if (error instanceof UpstreamUnavailable) {
    if (error.kind === 'timeout') return upstreamTimeout(error.message);
    if (error.kind === 'status' && error.status === 429) {
      return flowControlDrop('upstream_busy', 'The inference pods are saturated');
    }
    return upstreamFailure(error.message);
  }
  return upstreamFailure(error instanceof Error ? error.message : String(error));
}
