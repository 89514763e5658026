import { StringDecoder } from 'node:string_decoder';
import { type OpenAIErrorBody, type Usage, usageOfResponse } from '@fairgate/openai';
import type { StreamFilter } from './sse-filter.js';

/** The events that end a Responses stream (it has no `[DONE]`), each with the final usage. */
const TERMINAL_EVENTS = new Set(['response.completed', 'response.incomplete', 'response.failed']);

/**
 * The gateway's interest in a pod's Responses API stream (`event: <type>` / `data: <json>`
 * events, as vLLM frames them), which passes through byte for byte: the first
 * `response.output_text.delta` (t5), and the terminal event (`response.completed`,
 * `.incomplete` or `.failed`), whose `response.usage` is the usage and which ends the stream.
 * A Responses stream carries no usage before its end: one that stops early after some output
 * (the client left, the pod failed) counts as its usage the gateway's estimate of its prompt
 * and one token per output delta (vLLM sends one per engine step, a token without
 * speculative decoding), so it is still metered. One that fails after it started ends with
 * the dialect's own `error` event.
 */
export class ResponsesSseFilter implements StreamFilter {
  usage: Usage | undefined;
  done = false;
  #sawFirstToken = false;
  readonly #decoder = new StringDecoder('utf8');
  /** The text of the event being received. */
  #pending = '';
  /** The `sequence_number` of the last event read. */
  #sequence = -1;

  /** Output deltas read. */
  #deltas = 0;

  constructor(
    private readonly onFirstToken: () => void,
    private readonly promptEstimate = 0,
  ) {}

  get usageSoFar(): Usage | undefined {
    if (this.usage || this.#deltas === 0) return this.usage;
    return {
      prompt_tokens: this.promptEstimate,
      completion_tokens: this.#deltas,
      total_tokens: this.promptEstimate + this.#deltas,
    };
  }

  /**
   * The Responses API's `error` event (type, code, message, param and the next sequence
   * number): a stream of this dialect has no `[DONE]`.
   */
  errorEvent({ error }: OpenAIErrorBody): string {
    const event = {
      type: 'error',
      code: error.code,
      message: error.message,
      param: error.param,
      sequence_number: this.#sequence + 1,
    };
    return `event: error\ndata: ${JSON.stringify(event)}\n\n`;
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
    const sequence = /"sequence_number": ?(\d+)/.exec(event)?.[1];
    if (sequence !== undefined) this.#sequence = Number(sequence);
    const type = /^event: ?(.*)$/m.exec(event)?.[1]?.trim();
    if (type === 'response.output_text.delta') {
      this.#deltas++;
      if (!this.#sawFirstToken) {
        this.#sawFirstToken = true;
        this.onFirstToken();
      }
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
