import { StringDecoder } from 'node:string_decoder';
import { type Usage, usageOfResponse } from '@fairgate/openai';
import type { StreamFilter } from './sse-filter.js';

/** The events that end a Responses stream (it has no `[DONE]`), each with the final usage. */
const TERMINAL_EVENTS = new Set(['response.completed', 'response.incomplete', 'response.failed']);

/**
 * The gateway's interest in a pod's Responses API stream (`event: <type>` / `data: <json>`
 * events, as vLLM frames them), which passes through byte for byte: the first
 * `response.output_text.delta` (t5), and the terminal event (`response.completed`,
 * `.incomplete` or `.failed`), whose `response.usage` is the usage and which ends the stream.
 * A Responses stream carries no usage before its end: one that stops early has none.
 */
export class ResponsesSseFilter implements StreamFilter {
  usage: Usage | undefined;
  done = false;
  #sawFirstToken = false;
  readonly #decoder = new StringDecoder('utf8');
  /** The text of the event being received. */
  #pending = '';

  constructor(private readonly onFirstToken: () => void) {}

  get usageSoFar(): Usage | undefined {
    return this.usage;
  }

  push(chunk: Buffer): Buffer[] {
    if (this.done) return [];
    this.#pending += this.#decoder.write(chunk);
    for (let end = this.#pending.indexOf('\n\n'); end >= 0; end = this.#pending.indexOf('\n\n')) {
      const event = this.#pending.slice(0, end);
      this.#pending = this.#pending.slice(end + 2);
      this.#read(event);
    }
    return [chunk];
  }

  #read(event: string): void {
    const type = /^event: ?(.*)$/m.exec(event)?.[1]?.trim();
    if (type === 'response.output_text.delta' && !this.#sawFirstToken) {
      this.#sawFirstToken = true;
      this.onFirstToken();
    }
    if (type === undefined || !TERMINAL_EVENTS.has(type)) return;
    const data = event
      .split('\n')
      .filter((line) => line.startsWith('data:'))
      .map((line) => line.slice(5).trimStart())
      .join('\n');
    try {
      this.usage = usageOfResponse(
        (JSON.parse(data) as { response?: { usage?: unknown } }).response?.usage,
      );
    } catch {
      // not JSON: no usage
    }
    this.done = true;
  }
}
