import { requestId } from './context.js';

/**
 * The Responses API's objects as vLLM builds them: the response (ResponsesResponse), its one
 * output message, usage, and the SSE events of a stream. One {@link ResponseIdentity} per
 * request gives every event the same response and message ids.
 */
export interface ResponseIdentity {
  id: string;
  messageId: string;
  createdAt: number;
  model: string;
}

/** The request's fields a response echoes. */
export interface ResponseEcho {
  instructions: string | null;
  metadata: Record<string, unknown> | null;
  temperature: number;
  topP: number;
  maxOutputTokens: number;
  user: string | null;
}

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export function responseIdentity(model: string): ResponseIdentity {
  return {
    id: requestId('resp_'),
    messageId: requestId('msg_'),
    createdAt: Math.floor(Date.now() / 1000),
    model,
  };
}

export function responseUsage(input: number, output: number, cached: number): ResponseUsage {
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: cached },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: input + output,
  };
}

export type ResponseStatus = 'in_progress' | 'completed' | 'incomplete';

const outputText = (text: string) => ({ type: 'output_text', text, annotations: [], logprobs: [] });

export function outputMessage(who: ResponseIdentity, text: string | null) {
  return {
    id: who.messageId,
    type: 'message',
    role: 'assistant',
    status: text === null ? 'in_progress' : 'completed',
    content: text === null ? [] : [outputText(text)],
  };
}

/**
 * The whole response. `text` null: not started (in_progress, no output); a response that
 * hit max_output_tokens is `incomplete` with reason max_output_tokens.
 */
export function responseObject(
  who: ResponseIdentity,
  echo: ResponseEcho,
  status: ResponseStatus,
  text: string | null,
  usage: ResponseUsage | null,
) {
  return {
    id: who.id,
    created_at: who.createdAt,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: echo.instructions,
    metadata: echo.metadata,
    model: who.model,
    object: 'response',
    output: text === null ? [] : [outputMessage(who, text)],
    parallel_tool_calls: true,
    temperature: echo.temperature,
    tool_choice: 'auto',
    tools: [],
    top_p: echo.topP,
    background: false,
    max_output_tokens: echo.maxOutputTokens,
    max_tool_calls: null,
    previous_response_id: null,
    prompt: null,
    reasoning: null,
    service_tier: 'auto',
    status,
    text: null,
    top_logprobs: null,
    truncation: 'disabled',
    usage,
    user: echo.user,
  };
}

/** Numbers the events of one stream (sequence_number from 0) and frames them as SSE. */
export class ResponseEvents {
  private sequence = 0;

  constructor(private readonly who: ResponseIdentity) {}

  /** `event: <type>` and `data: <json>`, as vLLM frames Responses events. */
  private frame(type: string, fields: Record<string, unknown>): string {
    const event = { type, sequence_number: this.sequence++, ...fields };
    return `event: ${type}\ndata: ${JSON.stringify(event)}\n\n`;
  }

  created(response: object): string {
    return this.frame('response.created', { response });
  }

  inProgress(response: object): string {
    return this.frame('response.in_progress', { response });
  }

  /** The message item and its text part open, before the first delta. */
  opened(): string {
    const ids = { output_index: 0, item_id: this.who.messageId };
    return (
      this.frame('response.output_item.added', {
        output_index: 0,
        item: outputMessage(this.who, null),
      }) +
      this.frame('response.content_part.added', { ...ids, content_index: 0, part: outputText('') })
    );
  }

  delta(text: string): string {
    return this.frame('response.output_text.delta', {
      content_index: 0,
      delta: text,
      item_id: this.who.messageId,
      output_index: 0,
      logprobs: [],
    });
  }

  /** The text, part and item close, then response.completed with the whole response. */
  closed(text: string, response: object): string {
    const ids = { item_id: this.who.messageId, output_index: 0 };
    return (
      this.frame('response.output_text.done', { content_index: 0, ...ids, text, logprobs: [] }) +
      this.frame('response.content_part.done', {
        ...ids,
        content_index: 0,
        part: outputText(text),
      }) +
      this.frame('response.output_item.done', {
        output_index: 0,
        item: outputMessage(this.who, text),
      }) +
      this.frame('response.completed', { response })
    );
  }
}
