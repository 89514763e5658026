/** Response and streaming-chunk types of the two generation endpoints (vLLM's shapes). */

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens: number } | null;
}

export type FinishReason = 'stop' | 'length' | 'abort' | 'tool_calls' | null;

/** A call in an assistant message: `arguments` is JSON text. */
export interface ChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A streamed piece of a call: the first names it (id, type, name), the next extend its arguments. */
export interface ChatToolCallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function: { name?: string; arguments: string };
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    message: { role: 'assistant'; content: string | null; tool_calls?: ChatToolCall[] };
    logprobs: null;
    finish_reason: FinishReason;
  }>;
  usage: Usage;
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    delta: { role?: 'assistant'; content?: string; tool_calls?: ChatToolCallDelta[] };
    logprobs: null;
    finish_reason: FinishReason;
  }>;
  /** With `stream_options.include_usage`: null on content chunks, set on the final one. */
  usage?: Usage | null;
}

export interface Completion {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  choices: Array<{ index: number; text: string; logprobs: null; finish_reason: FinishReason }>;
  usage: Usage;
}

export interface CompletionChunk {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  choices: Array<{ index: number; text: string; logprobs: null; finish_reason: FinishReason }>;
  usage?: Usage | null;
}

export type StreamChunk = ChatCompletionChunk | CompletionChunk;

export interface ModelList {
  object: 'list';
  data: Array<{
    id: string;
    object: 'model';
    created: number;
    owned_by: string;
    max_model_len?: number;
  }>;
}

export function makeUsage(
  promptTokens: number,
  completionTokens: number,
  cachedTokens?: number,
): Usage {
  const usage: Usage = {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
  };
  if (cachedTokens !== undefined) usage.prompt_tokens_details = { cached_tokens: cachedTokens };
  return usage;
}

/** Text carried by a streaming chunk (chat delta or completion text), '' when none. */
export function chunkText(chunk: StreamChunk): string {
  const choice = chunk.choices[0];
  if (!choice) return '';
  if ('delta' in choice) return choice.delta.content ?? '';
  return choice.text ?? '';
}

/** True for the final usage-only chunk vLLM sends with include_usage (`choices: []`). */
export function isUsageChunk(chunk: StreamChunk): boolean {
  return chunk.choices.length === 0 && chunk.usage != null;
}
