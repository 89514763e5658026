import type { ServerResponse } from 'node:http';
import {
  type ChatToolCall,
  encodeSseData,
  type FinishReason,
  makeUsage,
  SSE_DONE,
  type Usage,
} from '@fairgate/openai';
import type { ClientLink } from '@fairgate/runtime';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { EngineDriver } from './driver.js';
import type { SequenceListener, SequenceSpec, SequenceView } from './engine.js';
import {
  fullResponse,
  type ResponseMeta,
  roleChunk,
  textChunk,
  toolCallChunk,
  toolCallDelta,
  toolCallId,
  usageChunk,
  usageSoFar,
} from './format.js';
import type { GenerationPlan } from './generation.js';
import { PseudoText } from './text.js';

/**
 * Connects one request to its engine sequence and writes the response: an SSE stream
 * (one chunk per token, as the engine emits them) or one JSON body at the end.
 *
 * Invariant: whatever ends the response early (client gone, stream cancelled, injected
 * reset) aborts the sequence at once, so its seat and KV blocks are free for the next
 * iteration.
 */
export interface Connection {
  /** Ends the TCP connection after the bytes already written (FIN, no HTTP terminator). */
  drop(): void;
}

export interface GenerationJob {
  driver: EngineDriver;
  plan: GenerationPlan;
  meta: ResponseMeta;
  /** Tells when the client goes away. */
  client: ClientLink;
  /** The node socket, or null when served without one (app.request in tests). */
  connection: Connection | null;
  /**
   * The Node response, when there is one: a JSON answer is written to it directly (one
   * writeHead + end) instead of through a web Response.
   */
  outgoing: ServerResponse | null;
  /** Drop the connection once this many tokens went out; 0 = never. */
  resetAfterTokens: number;
  onReset(): void;
}

/** How a connection broken by --reset-after-tokens fails where it has no socket to drop. */
export const RESET_MESSAGE = 'connection reset (fairgate-sim --reset-after-tokens)';

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
};

function sequenceSpec(plan: GenerationPlan, id: string): SequenceSpec {
  return {
    id,
    promptTokens: plan.promptTokens,
    promptBlockHashes: plan.promptBlockHashes,
    outputTokens: plan.outputTokens,
    finishReason: plan.finishReason,
    ...(plan.lora === null ? {} : { lora: plan.lora }),
  };
}

/** The call the answer carries (a fresh id per request), or null for a text answer. */
function toolCallOf(plan: GenerationPlan): ChatToolCall | null {
  if (plan.toolCall === null) return null;
  const { name, arguments: args } = plan.toolCall;
  return { id: toolCallId(), type: 'function', function: { name, arguments: args } };
}

function finishReasonOf(plan: GenerationPlan): FinishReason {
  return plan.toolCall === null ? plan.finishReason : 'tool_calls';
}

function usageOf(seq: SequenceView): Usage {
  return makeUsage(seq.spec.promptTokens, seq.generated, seq.cachedTokens ?? 0);
}

/** Abort the sequence when the client leaves (covers time spent waiting in the queue). */
function abortOnDisconnect(job: GenerationJob, seq: SequenceView): void {
  job.client.onLeave(() => job.driver.abort(seq));
}

/** Submits the sequence (QueueFullError propagates) and returns the SSE response at once. */
export function streamResponse(job: GenerationJob): Response {
  const { driver, plan, meta } = job;
  const text = new PseudoText(plan.textSeed);
  const toolCall = toolCallOf(plan);
  const finishReason = finishReasonOf(plan);
  const encoder = new TextEncoder();
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let open = true;
  let dropWhenFlushed = false;
  let seq: SequenceView | null = null;

  const send = (frame: string) => controller.enqueue(encoder.encode(frame));
  const drop = () => {
    open = false;
    if (job.connection) job.connection.drop();
    else controller.error(new Error(RESET_MESSAGE));
  };

  const listener: SequenceListener = {
    onToken(s) {
      if (!open) return;
      // With continuous_usage_stats every chunk carries the usage so far (the role chunk's
      // has no completion tokens yet; a content chunk's counts its own token).
      const continuous = meta.continuousUsage;
      if (s.generated === 1 && meta.endpoint === 'chat') {
        send(encodeSseData(roleChunk(meta, continuous ? usageSoFar(plan.promptTokens, 0) : null)));
      }
      const last = s.generated === plan.outputTokens;
      if (s.generated === job.resetAfterTokens) {
        // Stop generating now; the connection drops once this chunk has left (see pull).
        dropWhenFlushed = true;
        driver.abort(s);
        job.onReset();
      }
      const usage = continuous ? usageSoFar(plan.promptTokens, s.generated) : null;
      const finish = last ? finishReason : null;
      const chunk =
        toolCall === null || plan.toolCall === null
          ? textChunk(meta, text.next(), finish, usage)
          : toolCallChunk(
              meta,
              toolCallDelta(toolCall, plan.toolCall.fragments, s.generated),
              finish,
              usage,
            );
      send(encodeSseData(chunk));
    },
    onFinish(s) {
      if (!open) return;
      if (meta.includeUsage) send(encodeSseData(usageChunk(meta, usageOf(s))));
      send(SSE_DONE);
      open = false;
      controller.close();
    },
  };

  const body = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
    // Called when the consumer has taken every queued chunk (highWaterMark 1): after the
    // reset chunk was handed to the socket. setImmediate lets that write reach the socket.
    pull() {
      if (!dropWhenFlushed) return;
      dropWhenFlushed = false;
      setImmediate(drop);
    },
    cancel() {
      open = false;
      if (seq) driver.abort(seq);
    },
  });

  seq = driver.submit(sequenceSpec(plan, meta.id), listener);
  abortOnDisconnect(job, seq);
  return new Response(body, { status: 200, headers: SSE_HEADERS });
}

/** Submits the sequence and resolves with the whole response when it finishes. */
export function completeResponse(job: GenerationJob): Promise<Response> {
  const { driver, plan, meta } = job;
  const text = new PseudoText(plan.textSeed);
  return new Promise<Response>((resolve, reject) => {
    let output = '';
    const listener: SequenceListener = {
      onToken(s) {
        output += text.next();
        if (s.generated !== job.resetAfterTokens) return;
        driver.abort(s);
        job.onReset();
        if (!job.connection) {
          reject(new Error(RESET_MESSAGE));
          return;
        }
        job.connection.drop();
        resolve(RESPONSE_ALREADY_SENT);
      },
      onFinish(s) {
        const answer = fullResponse(
          meta,
          output,
          finishReasonOf(plan),
          usageOf(s),
          toolCallOf(plan),
        );
        const json = JSON.stringify(answer);
        const { outgoing } = job;
        if (outgoing && !outgoing.headersSent) {
          outgoing.writeHead(200, {
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(json),
          });
          outgoing.end(json);
          resolve(RESPONSE_ALREADY_SENT);
          return;
        }
        resolve(new Response(json, { headers: { 'content-type': 'application/json' } }));
      },
    };
    const seq = driver.submit(sequenceSpec(plan, meta.id), listener);
    abortOnDisconnect(job, seq);
    // Nobody reads the answer of a gone client; settle so the handler does not hang.
    job.client.onLeave(() => resolve(new Response(null, { status: 499 })));
  });
}
