import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { ReleaseOutcome } from '@fairgate/core';
import type { Usage } from '@fairgate/openai';
import { endSpan } from '@fairgate/telemetry';
import type { GatewayDeps } from '../context.js';
import { DrainAborted } from '../drain.js';
import { draining, noticeDrop, upstreamFailure } from '../errors.js';
import { QUEUE_MS_HEADER, REQUEST_ID_HEADER } from '../middleware/request-context.js';
import type { HeldSlot } from '../slot/held-slot.js';
import type { StreamFilter } from '../upstream/sse-filter.js';
import type { Forwarded } from './forward.js';
import type { Call } from './receive.js';

/**
 * Stage 5: the pod's answer to the client, written straight to the Node response.
 * A collected body goes out in one write. A stream goes out as its bytes come (the pod's
 * own buffers, through the SseFilter: upstream/sse-filter.ts), with backpressure both ways:
 * when the client's socket takes no more, the pod is not read until it drains, so a slow
 * client slows its upstream read and nothing buffers without bound. A stream that fails
 * after its first byte ends with the error event of its dialect (chat: an error data event
 * and `[DONE]`; Responses: an `error` event): the client already has its 200. The slot is
 * released (HeldSlot.release) as soon as the pod's answer is complete and its last bytes are
 * on the client's socket; resolves when the response is written, with the outcome `finish`
 * counts.
 */
export interface Relayed {
  readonly outcome: ReleaseOutcome;
  readonly usage: Usage | undefined;
  readonly status: number;
  readonly error?: Error;
}

type Delivered = Extract<Forwarded, { ok: true }>;

export function relay(
  deps: GatewayDeps,
  call: Call,
  held: HeldSlot,
  forwarded: Delivered,
): Promise<Relayed> | Relayed {
  const { outgoing } = call.node;
  // While the replica drains, every answer closes its connection: a keep-alive client
  // then reconnects through its balancer to a replica that stays.
  if (deps.drain.draining) outgoing.shouldKeepAlive = false;
  const { upstream } = forwarded;
  const queueHeader = held.queueMs.toFixed(1);
  if (upstream.kind === 'json') {
    outgoing.writeHead(upstream.status, {
      'content-type': upstream.contentType,
      'content-length': Buffer.byteLength(upstream.text),
      [REQUEST_ID_HEADER]: call.state.requestId,
      [QUEUE_MS_HEADER]: queueHeader,
      ...call.state.rateLimitHeaders,
    });
    // The head passed Node's checks (a refused header value throws above: 502,
    // upstream_error). end() writes head and body to the socket at once; then the slot goes
    // on (its release is the next write: the client's bytes leave first).
    outgoing.end(upstream.text);
    held.release('completed', upstream.usage);
    endSpan(forwarded.span, { status: upstream.status });
    return { outcome: 'completed', usage: upstream.usage, status: upstream.status };
  }
  outgoing.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    'x-accel-buffering': 'no',
    [REQUEST_ID_HEADER]: call.state.requestId,
    [QUEUE_MS_HEADER]: queueHeader,
    ...call.state.rateLimitHeaders,
  });
  const { stream } = upstream;
  return new Promise((resolve) => {
    const onDrain = () => stream.resume();
    outgoing.on('drain', onDrain);
    stream.attach({
      write: (chunks) => write(outgoing, chunks),
      end(error) {
        outgoing.off('drain', onDrain);
        const ended = streamEnd(stream.filter, held, error);
        if (ended.event) outgoing.write(ended.event);
        // end() uncorks the socket fully (Node 20, 22 and 24): this tick's writes and the
        // end leave now, in one writev.
        outgoing.end();
        // The pod is done: its slot goes on right after the client's last bytes, before
        // anything else of this request (spans, metrics, the relay's promise). A stream
        // that ended before its final usage chunk (the client left, the pod reset or
        // truncated it) is metered with the usage so far of the last chunk it read.
        const usage = stream.filter.usage ?? stream.filter.usageSoFar;
        held.release(ended.outcome, usage);
        endSpan(forwarded.span, { status: 200, ...(ended.error ? { error: ended.error } : {}) });
        resolve({
          outcome: ended.outcome,
          usage,
          status: 200,
          ...(ended.error ? { error: ended.error } : {}),
        });
      },
    });
  });
}

/**
 * Writes `chunks` in one go: the response's socket stays corked until the next tick, so these
 * and whatever follows in the same tick (more chunks, the end of the response) leave in one
 * writev. False when the socket's buffer is full.
 *
 * The socket is corked, not the response. Node 22.23's `ServerResponse.cork()` keeps
 * chunked writes in a buffer of its own. That buffer drops them when `end()` comes before
 * the uncork, and emits no 'drain' after it (nodejs/node#60432). A stream then lost its last
 * events and `[DONE]`, and one that filled the client's socket stalled for good. Corking
 * the socket is what `ServerResponse.cork()` does in Node 20.
 */
function write(outgoing: ServerResponse, chunks: readonly Buffer[]): boolean {
  const { socket } = outgoing;
  socket?.cork();
  // Slices of a few events are joined (a copy of a few KB costs less than an iovec and a
  // chunk-size line per slice); a large read goes out slice by slice.
  const flowing =
    chunks.length === 1 || byteLength(chunks) > JOIN_LIMIT
      ? chunks.reduce((_, chunk) => outgoing.write(chunk), true)
      : outgoing.write(Buffer.concat(chunks));
  if (socket) process.nextTick(uncork, socket);
  return flowing;
}

const JOIN_LIMIT = 64 * 1024;

function byteLength(chunks: readonly Buffer[]): number {
  let total = 0;
  for (const chunk of chunks) total += chunk.length;
  return total;
}

function uncork(socket: Socket): void {
  socket.uncork();
}

/** How a stream ended: its outcome, and the SSE error event to send (if any). */
function streamEnd(
  filter: StreamFilter,
  held: HeldSlot,
  error: Error | undefined,
): { outcome: ReleaseOutcome; event?: string; error?: Error } {
  if (filter.done) return { outcome: 'completed' };
  if (held.abort.aborted) {
    const reason = held.abort.reason;
    // Flow control took the slot back (in-flight eviction): tell the client why.
    if (held.evicted)
      return { outcome: 'cancelled', event: filter.errorEvent(noticeDrop('evict').toBody()) };
    if (reason instanceof DrainAborted) {
      // The replica's drain timeout ended before the stream did.
      const message = 'This gateway replica shut down before the stream finished';
      return { outcome: 'cancelled', event: filter.errorEvent(draining(message).toBody()) };
    }
    return { outcome: 'cancelled' }; // the client left: nobody reads
  }
  if (error) {
    const message = `upstream stream failed: ${error.message}`;
    return {
      outcome: 'upstream_error',
      event: filter.errorEvent(upstreamFailure(message, 'upstream_reset').toBody()),
      error: new Error(message),
    };
  }
  const message = 'upstream stream ended before its last event';
  return {
    outcome: 'upstream_error',
    event: filter.errorEvent(upstreamFailure(message, 'upstream_truncated').toBody()),
    error: new Error(message),
  };
}
