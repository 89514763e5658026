import { endSpan } from '@fairgate/telemetry';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { Span } from '@opentelemetry/api';
import type { DrainTicket } from '../drain.js';
import { noHealthyPod, upstreamFailure } from '../errors.js';
import { REQUEST_ID_HEADER } from '../middleware/request-context.js';
import { exchange } from '../upstream/exchange.js';
import { SlotAbort } from '../upstream/slot-abort.js';
import type { Call } from './receive.js';

/**
 * An endpoint that needs no slot (`kind: 'direct'` in the endpoint table: the tokenizer's
 * `/tokenize` and `/detokenize`): after stage 1 (authenticated, validated, its model's pool
 * found) it goes at once to the pool's least-loaded healthy pod, as this replica sees it, and
 * the pod's answer goes to the client as it is. Nothing waits in the scheduler, nothing is
 * metered; the drain waits for it as for any request.
 */
export async function serveDirect(
  call: Call,
  ticket: DrainTicket,
  server: Span,
): Promise<Response | typeof RESPONSE_ALREADY_SENT> {
  const aborted = new SlotAbort();
  const stopOnLeave = call.client.onLeave(() =>
    aborted.abort(new Error('client closed the connection')),
  );
  try {
    const pod = call.pool.pods.alternative('');
    if (!pod) throw noHealthyPod();
    pod.inflight++;
    let upstream: Awaited<ReturnType<typeof exchange>>;
    try {
      upstream = await exchange(pod, {
        path: call.route,
        text: call.body,
        stream: false,
        hasStreamOptions: false,
        headers: {},
        signal: aborted,
        clientWantsUsage: false,
        clientWantsContinuousUsage: false,
        onHeaders: () => {},
        onFirstToken: () => {},
      });
    } catch (error) {
      throw upstreamFailure(`pod ${pod.config.name}: ${(error as Error).message}`);
    } finally {
      pod.inflight--;
    }
    if (upstream.kind !== 'json') throw upstreamFailure(`pod ${pod.config.name} sent a stream`);
    call.node.outgoing.writeHead(upstream.status, {
      'content-type': upstream.contentType,
      'content-length': Buffer.byteLength(upstream.text),
      [REQUEST_ID_HEADER]: call.state.requestId,
    });
    call.node.outgoing.end(upstream.text);
    endSpan(server, { status: upstream.status });
    return RESPONSE_ALREADY_SENT;
  } finally {
    stopOnLeave();
    ticket.leave();
  }
}
