import { randomUUID } from 'node:crypto';
import type { TenantConfig } from '@fairgate/config';
import { type ReleaseOutcome, rejectionResponse } from '@fairgate/core';
import {
  ENDPOINT_PATHS,
  type Endpoint,
  type GenerationRequest,
  OpenAIHttpError,
  parseGenerationRequest,
  parseJsonBody,
  type Usage,
} from '@fairgate/openai';

import {
  Attr,
  endSpan,
  SpanEvents,
  SpanKind,
  SpanNames,
  startChildSpan,
  startServerSpan,
  traceHeaders,
} from '@fairgate/telemetry';
import type { Context as OtelContext, Span } from '@opentelemetry/api';
import type { Context } from 'hono';
import { readRequestBody } from '../body.js';
import { type Classification, classify, SLO_CLASS_HEADER, SLO_TTFT_HEADER } from '../classify.js';
import { clientAbortSignal } from '../client-signal.js';
import { DEFAULT_MAX_TOKENS, type GatewayDeps } from '../context.js';
import { isSloProtected } from '../control/settings.js';
import {
  flowControlDrop,
  noHealthyPod,
  unauthorized,
  upstreamFailure,
  upstreamTimeout,
} from '../errors.js';
import { EvictedError } from '../grants.js';
import { QUEUE_MS_HEADER } from '../middleware/request-context.js';
import { bearerToken } from '../tenants.js';
import type { PodState } from '../upstream/pods.js';
import { callUpstream, type UpstreamResponse, UpstreamUnavailable } from '../upstream/proxy.js';

/**
 * POST /v1/chat/completions and /v1/completions: the request lifecycle
 * t1..t7 of docs/architecture.md. Every admitted request ends in exactly one
 * release (completed, cancelled, evicted or upstream_error) unless the
 * scheduler ended it first (expired / reclaimed), which release treats as a
 * no-op.
 */
export function generationHandler(deps: GatewayDeps, endpoint: Endpoint) {
  const route = ENDPOINT_PATHS[endpoint];
  return async function generation(c: Context): Promise<Response> {
    const state = c.get('request');
    const headers: Record<string, string | undefined> = {
      traceparent: c.req.header('traceparent'),
      tracestate: c.req.header('tracestate'),
    };
    const server = startServerSpan(deps.tracer, 'POST', route, headers);
    server.span.setAttribute(Attr.replica, deps.replica);
    server.span.setAttribute(Attr.requestId, state.requestId);
    try {
      const response = await serve(deps, c, endpoint, route, server.span, server.ctx);
      return response;
    } catch (error) {
      const status = error instanceof OpenAIHttpError ? error.status : 500;
      endSpan(server.span, { status, ...(status >= 500 ? { error } : {}) });
      throw error;
    }
  };
}

function authenticate(deps: GatewayDeps, c: Context): TenantConfig {
  const token = bearerToken(c.req.header('authorization'));
  if (!token) throw unauthorized('Missing `Authorization: Bearer <API key>` header');
  const tenant = deps.tenants().authenticate(token);
  if (!tenant) throw unauthorized('Incorrect API key provided');
  return tenant;
}

async function serve(
  deps: GatewayDeps,
  c: Context,
  endpoint: Endpoint,
  route: string,
  serverSpan: Span,
  serverCtx: OtelContext,
): Promise<Response> {
  const state = c.get('request');
  const config = deps.config();
  const clientSignal = clientAbortSignal(c);
  const tenant = authenticate(deps, c);
  serverSpan.setAttribute(Attr.tenant, tenant.id);
  const request = parseGenerationRequest(
    endpoint,
    parseJsonBody(await readRequestBody(c, config.limits.max_body_bytes)),
  );
  const nowMs = Date.now();
  const cls = classify({
    tenant,
    sloClasses: config.slo_classes,
    request,
    classHeader: c.req.header(SLO_CLASS_HEADER),
    ttftHeader: c.req.header(SLO_TTFT_HEADER),
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
  let pod: string;
  try {
    pod = await acquire(deps, schedulerId, tenant, cls, nowMs, clientSignal);
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
    throw error;
  }
  const t2 = performance.now();
  const queueMs = t2 - state.t1;
  deps.metrics.queueWait.observe(labels, queueMs / 1_000);
  queue.span.setAttribute(Attr.pod, pod);
  endSpan(queue.span);
  serverSpan.setAttributes({ [Attr.pod]: pod, [Attr.queueMs]: queueMs });
  const queueHeader = queueMs.toFixed(1);

  // t3 .. t6: upstream, holding the slot.
  const slot = deps.broker.track(schedulerId);
  const abortUpstream = () => slot.abort(new Error('client closed the connection'));
  clientSignal.addEventListener('abort', abortUpstream, { once: true });
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
    clientSignal.removeEventListener('abort', abortUpstream);
    deps.broker.untrack(schedulerId);
    deps.metrics.inflight.dec();
    const evicted = outcome !== 'completed' && slot.signal.reason instanceof EvictedError;
    const finalOutcome: ReleaseOutcome = evicted ? 'evicted' : outcome;
    void deps.scheduler
      .release(schedulerId, {
        outcome: finalOutcome,
        ...(usage
          ? { usage: { inputTokens: usage.prompt_tokens, outputTokens: usage.completion_tokens } }
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
    client.addEvent(SpanEvents.firstToken);
    const ttftSeconds = (t5 - state.t1) / 1_000;
    deps.metrics.ttft.observe(labels, ttftSeconds);
    // The controller's signal: the same gateway TTFT, SLO-protected classes only.
    if (isSloProtected(cls.priority)) deps.control.recorder.recordTtft(ttftSeconds);
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
      slot.signal,
      onFirstToken,
    ));
  } catch (error) {
    if (slot.signal.reason instanceof EvictedError) {
      finish('evicted', undefined, 429);
      throw flowControlDrop('evicted', 'The request was evicted by flow control');
    }
    if (clientSignal.aborted) {
      finish('cancelled', undefined, 499);
      return new Response(null, { status: 499 }); // nobody reads it: the client is gone
    }
    const failure = toHttpFailure(error);
    if (isSloProtected(cls.priority) && isOverloadSignal(error)) {
      deps.control.recorder.recordFailure();
    }
    finish('upstream_error', undefined, failure.status, error);
    throw failure;
  }

  if (upstream.kind === 'json') {
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
      [QUEUE_MS_HEADER]: queueHeader,
    },
  });
}

/** Enqueue, then wait for the grant unless it came at once; cancels when the client leaves. */
async function acquire(
  deps: GatewayDeps,
  id: string,
  tenant: TenantConfig,
  cls: Classification,
  nowMs: number,
  clientSignal: AbortSignal,
): Promise<string> {
  if (deps.pods.healthyPods().length === 0) throw noHealthyPod();
  const result = await deps.scheduler.enqueue({
    id,
    tenant: tenant.id,
    band: cls.priority,
    replica: deps.replica,
    sloClass: cls.sloClass,
    kvBlocks: cls.kvBlocks,
    ...(cls.deadlineMs !== undefined ? { deadlineMs: Math.max(0, cls.deadlineMs - nowMs) } : {}),
  });
  if (result.status === 'granted') return result.pod;
  if (result.status === 'rejected') {
    const drop = rejectionResponse(result.code);
    if (drop.status === 503) throw noHealthyPod();
    throw flowControlDrop(drop.dropReason, dropMessage(drop.dropReason, tenant.id));
  }
  const onAbort = () => {
    deps.broker.forget(id);
    void deps.scheduler
      .cancel(id)
      .catch(() => deps.metrics.redisErrors.inc({ operation: 'cancel' }));
  };
  clientSignal.addEventListener('abort', onAbort, { once: true });
  try {
    deps.metrics.waiting.inc();
    return await deps.broker.waitForGrant(id);
  } finally {
    deps.metrics.waiting.dec();
    clientSignal.removeEventListener('abort', onAbort);
  }
}

function dropMessage(reason: string, tenant: string): string {
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
  signal: AbortSignal,
  onFirstToken: (client: Span) => () => void,
): Promise<{ upstream: UpstreamResponse; client: Span }> {
  const config = deps.config();
  let pod: PodState | undefined = deps.pods.get(podName) ?? deps.pods.alternative(podName);
  const wantsUsage = request.stream_options?.include_usage === true;
  let lastError: unknown = new UpstreamUnavailable(`pod ${podName} is not configured`, 'connect');
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
            client.span.addEvent(SpanEvents.upstreamHeaders, { [Attr.httpStatus]: status }),
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
  throw lastError;
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
