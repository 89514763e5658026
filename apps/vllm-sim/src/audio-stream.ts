import { encodeSseData, SSE_DONE } from '@fairgate/openai';
import type { ClientLink } from '@fairgate/runtime';
import { type EndpointDeps, nowSeconds, overloaded } from './context.js';
import { QueueFullError, type SequenceSpec, type SequenceView } from './engine.js';
import { SSE_HEADERS } from './respond.js';
import type { PseudoText } from './text.js';

/** What a streamed transcription or translation says of itself. */
export interface AudioStreamMeta {
  readonly id: string;
  readonly object: 'transcription.chunk' | 'translation.chunk';
  readonly model: string;
  /** The audio's tokens: vLLM's `prompt_tokens` of the usage. */
  readonly promptTokens: number;
  /** vLLM's `stream_include_usage` and `stream_continuous_usage_stats` form fields. */
  readonly includeUsage: boolean;
  readonly continuousUsage: boolean;
}

/**
 * vLLM's streamed transcription (`stream=true`): every 30-second window runs on the engine
 * at once, and their text goes out in window order, a `transcription.chunk` per token
 * (`choices[0].delta.content`, the window's last with its `finish_reason`); with
 * `stream_include_usage` a last chunk with no choices carries the usage (with
 * `stream_continuous_usage_stats`, every chunk does); then `[DONE]`.
 */
export function streamAudio(
  deps: EndpointDeps,
  specs: readonly SequenceSpec[],
  client: ClientLink,
  meta: AudioStreamMeta,
  words: PseudoText,
): Response {
  const created = nowSeconds();
  const encoder = new TextEncoder();
  const generated = specs.map(() => 0);
  const sent = specs.map(() => 0);
  let window = 0;
  let completionTokens = 0;
  let open = true;
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const send = (value: unknown) => controller.enqueue(encoder.encode(encodeSseData(value)));
  const usage = () => ({
    prompt_tokens: meta.promptTokens,
    completion_tokens: completionTokens,
    total_tokens: meta.promptTokens + completionTokens,
  });
  const chunk = (choices: unknown[], withUsage: boolean) => ({
    id: meta.id,
    object: meta.object,
    created,
    model: meta.model,
    choices,
    ...(withUsage ? { usage: usage() } : {}),
  });

  /** Sends what the windows have generated, in window order; ends after the last. */
  const flush = () => {
    for (; window < specs.length; window++) {
      const outputTokens = (specs[window] as SequenceSpec).outputTokens;
      while ((sent[window] as number) < (generated[window] as number)) {
        sent[window] = (sent[window] as number) + 1;
        completionTokens++;
        const finish = sent[window] === outputTokens ? { finish_reason: 'stop' } : {};
        send(chunk([{ delta: { content: words.next() }, ...finish }], meta.continuousUsage));
      }
      if ((sent[window] as number) < outputTokens) return;
    }
    if (meta.includeUsage) send(chunk([], true));
    controller.enqueue(encoder.encode(SSE_DONE));
    open = false;
    controller.close();
  };

  const submitted: SequenceView[] = [];
  const abortAll = () => {
    open = false;
    for (const seq of submitted) deps.driver.abort(seq);
  };
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
    cancel: abortAll,
  });
  try {
    specs.forEach((spec, index) => {
      const listener = {
        onToken(seq: SequenceView) {
          generated[index] = seq.generated;
          if (open) flush();
        },
        onFinish() {},
      };
      submitted.push(deps.driver.submit(spec, listener));
    });
  } catch (error) {
    abortAll();
    if (error instanceof QueueFullError) throw overloaded(error);
    throw error;
  }
  client.onLeave(abortAll);
  return new Response(body, { status: 200, headers: SSE_HEADERS });
}
