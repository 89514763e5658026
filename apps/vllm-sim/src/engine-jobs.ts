import type { ClientLink } from '@fairgate/runtime';
import type { EngineDriver } from './driver.js';
import type { SequenceListener, SequenceSpec, SequenceView } from './engine.js';

/**
 * Runs a request's sequences on the engine and waits for all of them: the path of every
 * endpoint that answers once at the end (pooling, score, rerank, audio). The sequences queue,
 * batch, hold KV blocks and count in the metrics like any chat request.
 *
 * Resolves with the finished sequences, or null when the client left first (every sequence
 * is then aborted, freeing its seat and blocks at once). A full waiting queue rejects with
 * QueueFullError after aborting the sequences already submitted.
 */
export function runToCompletion(
  driver: EngineDriver,
  specs: readonly SequenceSpec[],
  client: ClientLink,
): Promise<SequenceView[] | null> {
  return new Promise((resolve, reject) => {
    const submitted: SequenceView[] = [];
    let unfinished = specs.length;
    const listener: SequenceListener = {
      onToken() {},
      onFinish() {
        unfinished--;
        if (unfinished === 0) resolve(submitted);
      },
    };
    try {
      for (const spec of specs) submitted.push(driver.submit(spec, listener));
    } catch (error) {
      for (const seq of submitted) driver.abort(seq);
      reject(error);
      return;
    }
    client.onLeave(() => {
      for (const seq of submitted) driver.abort(seq);
      resolve(null);
    });
  });
}

/**
 * A prefill-only sequence (embedding, pooling, score): one iteration computes the prompt and
 * finishes it, costing (beta + gamma) * prompt tokens like a prefill; no token is generated.
 */
export function prefillSpec(id: string, promptTokens: number, lora: string | null): SequenceSpec {
  return {
    id,
    promptTokens,
    promptBlockHashes: [],
    outputTokens: 1,
    finishReason: 'stop',
    prefillOnly: true,
    ...(lora === null ? {} : { lora }),
  };
}
