import { createParser, type EventSourceMessage } from 'eventsource-parser';
import type { OpenAIErrorBody } from './errors.js';

/** The terminator line OpenAI-compatible streams end with. */
export const SSE_DONE = 'data: [DONE]\n\n';
export const SSE_DONE_DATA = '[DONE]';

/** Encodes one JSON value as an SSE data event. */
export function encodeSseData(value: unknown): string {
  return `data: ${JSON.stringify(value)}\n\n`;
}

/**
 * An error inside a stream that has already started (status 200 sent): vLLM and
 * OpenAI send the error object as a data event; the stream then ends with [DONE].
 */
export function encodeSseError(body: OpenAIErrorBody): string {
  return encodeSseData(body) + SSE_DONE;
}

export interface SseDecoder {
  /** Feeds raw bytes or text; events are emitted as soon as they are complete. */
  feed(chunk: Uint8Array | string): void;
  /** Flushes a trailing partial UTF-8 sequence; call at end of stream. */
  end(): void;
}

/**
 * Incremental SSE decoder, correct across arbitrary chunk boundaries (split
 * lines, split CRLF, split multi-byte UTF-8 characters). Built on
 * eventsource-parser; UTF-8 decoding is streaming so a code point cut between
 * two chunks is joined, not replaced.
 */
export function createSseDecoder(onEvent: (event: EventSourceMessage) => void): SseDecoder {
  const parser = createParser({ onEvent });
  const utf8 = new TextDecoder('utf-8');
  return {
    feed(chunk) {
      parser.feed(typeof chunk === 'string' ? chunk : utf8.decode(chunk, { stream: true }));
    },
    end() {
      const rest = utf8.decode();
      if (rest) parser.feed(rest);
    },
  };
}

/**
 * Decodes a byte stream into SSE events. Yields each event's data string,
 * including the final `[DONE]`.
 */
export async function* decodeSseStream(
  stream: AsyncIterable<Uint8Array | string>,
): AsyncGenerator<EventSourceMessage> {
  const pending: EventSourceMessage[] = [];
  const decoder = createSseDecoder((event) => pending.push(event));
  for await (const chunk of stream) {
    decoder.feed(chunk);
    while (pending.length > 0) yield pending.shift()!;
  }
  decoder.end();
  while (pending.length > 0) yield pending.shift()!;
}

export type { EventSourceMessage };
