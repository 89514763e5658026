import { isSheddablePriority, type ReleaseOutcome } from '@fairgate/core';
import { OpenAIHttpError } from '@fairgate/openai';
import {
  Attr,
  addSpanEvent,
  endSpan,
  SpanEvents,
  SpanKind,
  startChildSpan,
  traceHeaders,
} from '@fairgate/telemetry';
import type { Span } from '@opentelemetry/api';
import type { GatewayDeps } from '../context.js';
import { DrainAborted } from '../drain.js';
import {
  CLIENT_GONE_STATUS,
  draining,
  noticeDrop,
  outcomeError,
  upstreamFailure,
  upstreamTimeout,
} from '../errors.js';
import type { HeldSlot } from '../slot/held-slot.js';
import { exchange, type UpstreamResponse, UpstreamUnavailable } from '../upstream/exchange.js';
import type { PodState } from '../upstream/pods.js';
import type { Call } from './receive.js';

/**
 * Stage 4: t3..t4(..t5), the request on its pod. A failure before the first upstream
 * byte (connect error, reset, 5xx or 429 status, headers timeout) is retried
 * `upstream.retries` times on another healthy pod, holding the slot. The answer is the
 * pod's response (a collected body, or a stream whose first event is in) with its CLIENT
 * span and pod, or why there is none: the outcome to release with and the error to answer.
 */
export type Forwarded =
  | {
      readonly ok: true;
      readonly upstream: UpstreamResponse;
      readonly span: Span;
      readonly pod: PodState;
    }
  | {
      readonly ok: false;
      readonly outcome: ReleaseOutcome;
      readonly status: number;
      /** The answer to send; undefined when the client is gone (nothing is sent). */
      readonly answer: OpenAIHttpError | undefined;
      readonly error: unknown;
    };

export async function forward(
  deps: GatewayDeps,
  call: Call,
  pod: string,
  held: HeldSlot,
): Promise<Forwarded> {
  try {
    return await attempts(deps, call, pod, held);
  } catch (error) {
    return failure(call, held, error);
  }
}

async function attempts(
  deps: GatewayDeps,
  call: Call,
  podName: string,
  held: HeldSlot,
): Promise<Forwarded> {
  const { forwarding } = call;
  const retries = deps.config().upstream.retries;
  const { pods } = call.pool;
  const accept = retryTarget(call);
  let pod: PodState | undefined = pods.granted(podName) ?? pods.alternative(podName, accept);
  let lastError: unknown; // an Error captures a stack trace: only built when needed
  for (let attempt = 0; attempt <= retries && pod; attempt++) {
    const client = startChildSpan(
      deps.tracer,
      call.ctx,
      `chat ${forwarding.model}`,
      SpanKind.CLIENT,
      {
        [Attr.requestModel]: forwarding.model,
        [Attr.pod]: pod.config.name,
        [Attr.serverAddress]: pod.config.url,
      },
    );
    pod.inflight++;
    const current = pod;
    try {
      const upstream = await exchange(current, {
        path: call.route,
        text: call.body,
        stream: forwarding.stream,
        dialect: forwarding.dialect,
        ...(call.upload ? { upload: call.upload } : {}),
        hasStreamOptions: forwarding.hasStreamOptions,
        headers: traceHeaders(client.ctx),
        signal: held.abort,
        clientWantsUsage: forwarding.clientWantsUsage,
        clientWantsContinuousUsage: forwarding.clientWantsContinuousUsage,
        onHeaders: (status) =>
          addSpanEvent(client.span, SpanEvents.upstreamHeaders, { [Attr.httpStatus]: status }),
        onFirstToken: () => recordFirstToken(call, held, client.span),
        inputTokens: call.cls.inputTokens,
      });
      pods.recordHealth(current.config.name, true);
      return { ok: true, upstream, span: client.span, pod: current };
    } catch (error) {
      current.inflight--;
      endSpan(client.span, { error });
      if (held.abort.aborted || !(error instanceof UpstreamUnavailable)) throw error;
      lastError = error;
      call.pool.metrics.upstreamErrors.inc({ pod: current.config.name, kind: error.kind });
      if (error.kind !== 'status') pods.recordHealth(current.config.name, false);
      pod = pods.alternative(current.config.name, accept);
    }
  }
  throw lastError ?? new UpstreamUnavailable(`pod ${podName} is not configured`, 'connect');
}

/**
 * Which pods a retry may go to: for a request for a LoRA adapter with `routing.lora: on`,
 * only those whose last `/v1/models` listed it (another pod would answer 404); else any.
 */
function retryTarget(call: Call): ((pod: PodState) => boolean) | undefined {
  const { adapter } = call;
  if (adapter === undefined || call.pool.config().routing.lora !== 'on') return undefined;
  const { models } = call.pool;
  return (pod) => models.listedBy(pod.config.name)?.some((entry) => entry.id === adapter) === true;
}

/** t5: the first content token reached the gateway (TTFT metric and span event). */
function recordFirstToken(call: Call, held: HeldSlot, client: Span): void {
  addSpanEvent(client, SpanEvents.firstToken);
  const ttftSeconds = (performance.now() - call.state.t1) / 1_000;
  call.series.ttft.observe(ttftSeconds);
  // The controller's signal: the same gateway TTFT, SLO-protected classes only.
  if (!isSheddablePriority(call.cls.priority)) {
    call.pool.control.recorder.recordTtft(ttftSeconds, held.queueMs / 1_000);
  }
}

/** Why the request got no response from any pod, as an outcome and an answer. */
function failure(call: Call, held: HeldSlot, error: unknown): Forwarded {
  if (held.evicted) {
    const answer = noticeDrop('evict');
    return { ok: false, outcome: 'evicted', status: answer.status, answer, error };
  }
  if (held.abort.reason instanceof DrainAborted) {
    const answer = draining('This gateway replica shut down before the request finished; retry');
    return { ok: false, outcome: 'cancelled', status: answer.status, answer, error };
  }
  if (call.client.gone) {
    return {
      ok: false,
      outcome: 'cancelled',
      status: CLIENT_GONE_STATUS,
      answer: undefined,
      error,
    };
  }
  if (!isSheddablePriority(call.cls.priority) && isOverloadSignal(error)) {
    call.pool.control.recorder.recordFailure();
  }
  const answer = toHttpFailure(error);
  return { ok: false, outcome: 'upstream_error', status: answer.status, answer, error };
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
      return outcomeError('upstream_busy');
    }
    return upstreamFailure(error.message);
  }
  return upstreamFailure(error instanceof Error ? error.message : String(error));
}
